package zmtp

import (
	"encoding/binary"
	"errors"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's sock_diag netlink interface (NETLINK_SOCK_DIAG,
// SOCK_DIAG_BY_FAMILY) answers for one tcp socket, named by its four
// addresses, with its state, uid and inode: a hash lookup, where reading
// /proc/net/tcp walks the whole table (milliseconds even when nearly
// empty, see BenchmarkTCPPeerUID). Without it (no inet_diag in the
// kernel), the table is read.

// errDiagUnavailable says sock_diag could not be asked (the caller reads
// the table instead).
var errDiagUnavailable = errors.New("sock_diag unavailable")

// Sizes and offsets of the kernel's structures (linux/inet_diag.h).
const (
	nlmsgHdrLen     = 16
	inetDiagReqLen  = 56 // inet_diag_req_v2
	inetDiagMsgLen  = 72 // inet_diag_msg
	diagMsgUID      = 64
	diagMsgInode    = 68
	tcpStateEstab   = 1
	diagTimeout     = time.Second
	sockDiagByFamil = 20 // SOCK_DIAG_BY_FAMILY
)

// diagSocket asks sock_diag for the tcp socket of family (AF_INET or
// AF_INET6) whose local address is src and remote is dst. found is false
// when there is none.
func diagSocket(family int, src, dst *net.TCPAddr) (s tableSocket, found bool, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return s, false, errDiagUnavailable
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(diagTimeout.Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)

	req := make([]byte, nlmsgHdrLen+inetDiagReqLen)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], sockDiagByFamil)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST)
	binary.NativeEndian.PutUint32(req[8:], 1) // seq
	r := req[nlmsgHdrLen:]
	r[0], r[1] = byte(family), unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], uint16(src.Port))
	binary.BigEndian.PutUint16(id[2:], uint16(dst.Port))
	if !putDiagAddr(id[4:20], src.IP, family) || !putDiagAddr(id[20:36], dst.IP, family) {
		return s, false, nil
	}
	binary.NativeEndian.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	binary.NativeEndian.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return s, false, errDiagUnavailable
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil || n < nlmsgHdrLen {
		return s, false, errDiagUnavailable
	}
	msg := buf[:n]
	switch binary.NativeEndian.Uint16(msg[4:]) {
	case unix.NLMSG_ERROR:
		// (an nlmsgerr: a negative errno; ENOENT: no such socket)
		if len(msg) >= nlmsgHdrLen+4 && int32(binary.NativeEndian.Uint32(msg[nlmsgHdrLen:])) == -int32(unix.ENOENT) {
			return s, false, nil
		}
		return s, false, errDiagUnavailable
	case sockDiagByFamil:
	default:
		return s, false, errDiagUnavailable
	}
	body := msg[nlmsgHdrLen:]
	if len(body) < inetDiagMsgLen {
		return s, false, errDiagUnavailable
	}
	s.state = "00"
	if body[1] == tcpStateEstab {
		s.state = tcpEstablished
	}
	s.uid = int(binary.NativeEndian.Uint32(body[diagMsgUID:]))
	s.inode = uint64(binary.NativeEndian.Uint32(body[diagMsgInode:]))
	return s, true, nil
}

// putDiagAddr writes ip as an inet_diag_sockid address of family (16
// bytes; an IPv4 address in the first 4, v4-mapped for AF_INET6).
func putDiagAddr(b []byte, ip net.IP, family int) bool {
	if family == unix.AF_INET {
		v4 := ip.To4()
		if v4 == nil {
			return false
		}
		copy(b, v4)
		return true
	}
	copy(b, ip.To16())
	return true
}

// diagPeer looks up the peer's socket of connection (local, remote) with
// sock_diag: an AF_INET socket, or an AF_INET6 one (v4-mapped when it
// reached an IPv4 address).
func diagPeer(local, remote *net.TCPAddr) (tableSocket, bool, error) {
	families := []int{unix.AF_INET, unix.AF_INET6}
	if remote.IP.To4() == nil {
		families = families[1:]
	}
	for _, fam := range families {
		s, found, err := diagSocket(fam, remote, local)
		if err != nil || found {
			return s, found, err
		}
	}
	return tableSocket{}, false, nil
}
