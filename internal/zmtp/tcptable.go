package zmtp

import (
	"bufio"
	"bytes"
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
// connection from this machine to a loopback address: the peer's socket
// is then in our socket table (/proc/net/tcp, or tcp6), the one whose
// local address is c's remote and whose remote is c's local. ok is false
// for any other connection, and unless that socket is established and
// still open (an inode: a process holds it). A socket closed by its
// process lingers in the table with uid 0 (TIME_WAIT) or none, while
// what it sent before may still wait to be read on c: such a peer is
// nobody's. The uid is the socket's maker's (its fsuid then); it does
// not change, whoever the descriptor is passed to.
//
// It asks sock_diag (a hash lookup), else reads the table line by line,
// comparing the two addresses as the kernel prints them before parsing
// anything: O(sockets in the network namespace), see
// BenchmarkTCPPeerUID.
func tcpPeerUID(c net.Conn) (uid int, ok bool) {
	return tcpPeer(c, true)
}

// tcpPeer is tcpPeerUID, asking sock_diag first if diag.
func tcpPeer(c net.Conn, diag bool) (uid int, ok bool) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || !local.IP.IsLoopback() || !remote.IP.IsLoopback() {
		return 0, false
	}
	if diag {
		if s, found, err := diagPeer(local, remote); err == nil {
			if !found || s.state != tcpEstablished || s.inode == 0 {
				return 0, false
			}
			return s.uid, true
		}
	}
	// The peer's socket: an AF_INET one in tcp, an AF_INET6 one in tcp6
	// (v4-mapped when it reached an IPv4 address).
	tables := []struct {
		path string
		v6   bool
	}{{"/proc/net/tcp", false}, {"/proc/net/tcp6", true}}
	if remote.IP.To4() == nil {
		tables = tables[1:]
	}
	for _, tb := range tables {
		want := procAddr(remote.IP, remote.Port, tb.v6) + " " + procAddr(local.IP, local.Port, tb.v6) + " "
		if s, found := findTCPSocket(tb.path, want); found {
			if s.state != tcpEstablished || s.inode == 0 {
				return 0, false
			}
			return s.uid, true
		}
	}
	return 0, false
}

// tcpEstablished is the table's state of an established connection.
const tcpEstablished = "01"

// tableSocket is what findTCPSocket reads of a socket: its state, the
// uid that made it and its inode (0: no process holds it).
type tableSocket struct {
	state string
	uid   int
	inode uint64
}

// findTCPSocket looks in the socket table at path for the socket whose
// addresses, as printed there, are want ("LOCAL REMOTE ").
func findTCPSocket(path, want string) (tableSocket, bool) {
	f, err := os.Open(path)
	if err != nil {
		return tableSocket{}, false
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 32<<10)
	if _, err := r.ReadSlice('\n'); err != nil { // (the header)
		return tableSocket{}, false
	}
	for {
		line, err := r.ReadSlice('\n')
		if len(line) > 0 {
			// "  sl: LOCAL REMOTE st ...": the addresses follow the
			// first ": ".
			if i := bytes.Index(line, []byte(": ")); i >= 0 && bytes.HasPrefix(line[i+2:], []byte(want)) {
				f := strings.Fields(string(line[i+2+len(want):]))
				// st tx:rx tr:when retrnsmt uid timeout inode
				if len(f) < 7 {
					return tableSocket{}, false
				}
				uid, err1 := strconv.Atoi(f[4])
				inode, err2 := strconv.ParseUint(f[6], 10, 64)
				if err1 != nil || err2 != nil {
					return tableSocket{}, false
				}
				return tableSocket{state: f[0], uid: uid, inode: inode}, true
			}
		}
		if err != nil {
			return tableSocket{}, false // (EOF; a line longer than the buffer is no socket's)
		}
	}
}

// procAddr prints ip and port as the socket table does: the address's
// 32-bit words each in host order, in hex (16 bytes in tcp6, an IPv4
// address v4-mapped there), then the port.
func procAddr(ip net.IP, port int, v6 bool) string {
	raw := ip.To4()
	if v6 || raw == nil {
		raw = ip.To16()
	}
	out := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(out[i:i+4], binary.BigEndian.Uint32(raw[i:i+4]))
	}
	return strings.ToUpper(hex.EncodeToString(out)) + fmt.Sprintf(":%04X", port)
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
