package zmtp

import (
	"fmt"
	"net"
	"os"
	"testing"
)

// loopbackPair connects a client c to a listener on 127.0.0.1 and returns
// both ends (s accepted), closed when tb ends.
func loopbackPair(tb testing.TB) (c, s net.Conn) {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	if c, err = net.Dial("tcp", l.Addr().String()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if s, err = l.Accept(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return c, s
}

// TestTCPPeerClosedIsNobody: a peer that closed its end is nobody's,
// whatever the table still shows of it (TIME_WAIT: uid 0, no inode),
// however much it sent before: it could not otherwise be told from
// root.
func TestTCPPeerClosedIsNobody(t *testing.T) {
	c, s := loopbackPair(t)
	for _, diag := range []bool{true, false} {
		if uid, ok := tcpPeer(s, diag); !ok || uid != os.Geteuid() {
			t.Fatalf("open peer (sock_diag %v): uid %d, %v", diag, uid, ok)
		}
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Our end reads what it sent, then EOF: the peer's socket is gone
	// from its process (FIN_WAIT2 or TIME_WAIT, no inode).
	buf := make([]byte, 16)
	for {
		if _, err := s.Read(buf); err != nil {
			break
		}
	}
	for _, diag := range []bool{true, false} {
		if uid, ok := tcpPeer(s, diag); ok {
			t.Fatalf("closed peer (sock_diag %v) taken for uid %d", diag, uid)
		}
	}
}

// TestProcAddr: addresses print as the kernel's table prints them.
func TestProcAddr(t *testing.T) {
	for _, c := range []struct {
		ip   string
		port int
		v6   bool
		want string
	}{
		{"127.0.0.1", 8080, false, "0100007F:1F90"},
		{"127.0.0.1", 1, true, "0000000000000000FFFF00000100007F:0001"},
		{"::1", 18790, true, "00000000000000000000000001000000:4966"},
	} {
		if got := procAddr(net.ParseIP(c.ip), c.port, c.v6); got != c.want {
			t.Errorf("procAddr(%s, %d, %v) = %s, want %s", c.ip, c.port, c.v6, got, c.want)
		}
		ip, port, ok := parseProcAddr(c.want)
		if !ok || port != c.port || !ip.Equal(net.ParseIP(c.ip)) {
			t.Errorf("parseProcAddr(%s) = %v %d %v", c.want, ip, port, ok)
		}
	}
}

// BenchmarkTCPPeerUID is the cost of identifying a loopback peer at
// accept (a table scan) with that many other tcp sockets on the machine.
// With sock_diag it is a hash lookup; the table (the fallback) is read
// whole, and the kernel walks its whole hash to print it.
func BenchmarkTCPPeerUID(b *testing.B) {
	for _, c := range []struct {
		others int
		diag   bool
	}{{0, true}, {10000, true}, {0, false}, {1000, false}, {10000, false}} {
		others, diag := c.others, c.diag
		b.Run(fmt.Sprintf("sock_diag=%v/sockets=%d", c.diag, others), func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for len(conns) < others { // (two sockets per connection)
				c, err := net.Dial("tcp", l.Addr().String())
				if err != nil {
					b.Skipf("%d sockets: %v", len(conns), err)
				}
				s, err := l.Accept()
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c, s)
			}
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			s, err := l.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ResetTimer()
			for range b.N {
				if _, ok := tcpPeer(s, diag); !ok {
					b.Fatal("peer not found")
				}
			}
		})
	}
}
