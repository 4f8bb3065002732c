package zmqx

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// tcpSocket is one line of the kernel's socket table (/proc/net/tcp,
// /proc/net/tcp6): its addresses, state (hex, "0A" is LISTEN) and the uid
// that made it.
type tcpSocket struct {
	local, remote net.TCPAddr
	state         string
	uid           int
}

// eachTCPSocket calls fn for every tcp socket of this network namespace
// until fn returns false.
func eachTCPSocket(fn func(s tcpSocket) bool) {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			lip, lport, ok1 := parseProcAddr(f[1])
			rip, rport, ok2 := parseProcAddr(f[2])
			uid, err := strconv.Atoi(f[7])
			if !ok1 || !ok2 || err != nil {
				continue
			}
			if !fn(tcpSocket{local: net.TCPAddr{IP: lip, Port: lport}, remote: net.TCPAddr{IP: rip, Port: rport}, state: f[3], uid: uid}) {
				return
			}
		}
	}
}

// ownListener checks that the tcp listener at addr (the remote end of a
// connection we made) is a socket on this machine owned by our user or
// root, from the kernel's socket tables.
func ownListener(addr net.Addr) error {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("not a tcp address: %v", addr)
	}
	err := fmt.Errorf("no listener of this machine serves %v", addr)
	eachTCPSocket(func(s tcpSocket) bool {
		if s.state != "0A" || s.local.Port != ta.Port || !(s.local.IP.Equal(ta.IP) || s.local.IP.IsUnspecified()) {
			return true
		}
		err = nil
		if s.uid != os.Geteuid() && s.uid != 0 {
			err = fmt.Errorf("the listener on %v belongs to uid %d, not to us (uid %d)", addr, s.uid, os.Geteuid())
		}
		return false
	})
	return err
}

// tcpPeerUID returns the uid that made the other end of c, a tcp
// connection from this machine to a loopback address (the peer's socket
// is then in our socket table: the one whose local address is c's remote
// and whose remote is c's local). ok is false for any other connection,
// or when the peer's socket is not found (it closed meanwhile).
func tcpPeerUID(c net.Conn) (uid int, ok bool) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || !local.IP.IsLoopback() || !remote.IP.IsLoopback() {
		return 0, false
	}
	eachTCPSocket(func(s tcpSocket) bool {
		if s.local.Port == remote.Port && s.remote.Port == local.Port && s.local.IP.Equal(remote.IP) && s.remote.IP.Equal(local.IP) {
			uid, ok = s.uid, true
			return false
		}
		return true
	})
	return uid, ok
}

// parseProcAddr parses a /proc/net/tcp address: hex ip (32-bit words in
// host order) and hex port.
func parseProcAddr(s string) (net.IP, int, bool) {
	h, p, ok := strings.Cut(s, ":")
	if !ok || (len(h) != 8 && len(h) != 32) {
		return nil, 0, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return nil, 0, false
	}
	raw, err := hex.DecodeString(h)
	if err != nil {
		return nil, 0, false
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 { // each word as stored on a little-endian host
		w := binary.NativeEndian.Uint32(raw[i : i+4])
		binary.BigEndian.PutUint32(ip[i:i+4], w)
	}
	if v4 := ip.To4(); v4 != nil && len(raw) == 16 && !ip.IsUnspecified() {
		ip = v4
	}
	return ip, int(port), true
}
