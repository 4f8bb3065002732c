package zmtp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
)

// curveSetup makes a server key pair, a client key pair and an allow-list
// file holding the client's public key.
type curveSetup struct {
	server, client CurveKeyPair
	allow          string
	rejects        *rejections
}

func newCurveSetup(t *testing.T) *curveSetup {
	t.Helper()
	s := &curveSetup{rejects: newRejections()}
	s.server, _ = NewCurveKeyPair()
	s.client, _ = NewCurveKeyPair()
	s.allow = filepath.Join(t.TempDir(), "curve-clients")
	if err := os.WriteFile(s.allow, []byte("# clients\n"+s.client.Public.String()+" test client\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *curveSetup) policy() *Policy {
	return &Policy{Curve: &CurveServer{Key: s.server, Clients: NewCurveAllowList(s.allow)},
		OnReject: s.rejects.add, HandshakeTimeout: 2 * time.Second}
}

func (s *curveSetup) dial(t *testing.T, typ, endpoint string, client CurveKeyPair, server CurveKey) (*Client, error) {
	t.Helper()
	return DialClientWith(context.Background(), typ, endpoint, DialOptions{Timeout: 3 * time.Second,
		Curve: &CurveClient{Server: server, Key: client}})
}

// pubSub listens a PUB on loopback with pol (s's policy when nil) and
// bound max, and connects a CURVE SUB of s's client to it; both are
// closed when the test ends.
func (s *curveSetup) pubSub(t *testing.T, pol *Policy, max int) (*Publisher, *Client) {
	t.Helper()
	if pol == nil {
		pol = s.policy()
	}
	p, err := ListenPub(context.Background(), "tcp://127.0.0.1:0", pol, max)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := s.dial(t, "SUB", "tcp://"+p.Addr().String(), s.client, s.server.Public)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// curveEchoRouter is echoRouter with policy pol on a tcp port of loopback.
func curveEchoRouter(t *testing.T, pol *Policy) string {
	t.Helper()
	return "tcp://" + echoRouterWith(t, "tcp://127.0.0.1:0", pol).Addr().String()
}

// TestCurveClientAgainstRouter: our DEALER and our ROUTER over CURVE,
// messages of every frame size class, both ways.
func TestCurveClientAgainstRouter(t *testing.T) {
	s := newCurveSetup(t)
	ep := curveEchoRouter(t, s.policy())
	c, err := s.dial(t, "DEALER", ep, s.client, s.server.Public)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, size := range []int{0, 1, 222, 223, 255, 256, 70000, 1 << 20} {
		body := bytes.Repeat([]byte{byte(size)}, size)
		if err := c.Send([]byte("x"), body); err != nil {
			t.Fatal(err)
		}
		got, err := c.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || string(got[0]) != "x" || !bytes.Equal(got[1], body) {
			t.Fatalf("size %d: echo of %d frames", size, len(got))
		}
	}
}

// TestCurveSubAgainstPub: our SUB and our PUB over CURVE.
func TestCurveSubAgainstPub(t *testing.T) {
	s := newCurveSetup(t)
	p, c := s.pubSub(t, nil, 1<<20)
	expectTopicFiltered(t, p, c)
}

// TestCurvePubMixedSizesInOrder: small messages (boxed and written by
// the sender) and large ones (boxed by the writer goroutine) published
// back to back to a CURVE subscriber arrive whole and in order: the
// nonces go up in the order the frames are written, whoever boxes them.
func TestCurvePubMixedSizesInOrder(t *testing.T) {
	s := newCurveSetup(t)
	p, c := s.pubSub(t, nil, 64<<20)
	subscribeAndWait(t, p, c, "t")
	sizes := []int{10, curveDirectMax - 100, curveDirectMax + 1, 200 << 10, 0, 3, 1 << 20, 64 << 10}
	const n = 200
	body := func(i int) []byte {
		b := bytes.Repeat([]byte{byte(i)}, sizes[i%len(sizes)])
		if len(b) > 0 {
			b[len(b)-1] = byte(i >> 8)
		}
		return b
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := 0; i < n; i++ {
			_ = p.SendParts([]byte("t"), body(i))
		}
	}()
	defer func() { <-sent }()
	for i := 0; i < n; i++ {
		m, err := c.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if len(m) != 2 || !bytes.Equal(m[1], body(i)) {
			t.Fatalf("message %d: %d frames, body of %d bytes, want %d", i, len(m), len(m[len(m)-1]), len(body(i)))
		}
	}
	if got := s.rejects.snapshot(); len(got) != 0 {
		t.Fatalf("peers rejected: %v", got)
	}
}

// TestCurveRefusals: an unknown client key, a wrong server key and a
// client of another mechanism are refused with clear errors, the allow-list
// is read again when it changes, and the server keeps serving.
func TestCurveRefusals(t *testing.T) {
	s := newCurveSetup(t)
	ep := curveEchoRouter(t, s.policy())
	stranger, _ := NewCurveKeyPair()
	_, err := s.dial(t, "DEALER", ep, stranger, s.server.Public)
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != CurveClientRefused {
		t.Fatalf("unknown client: %v", err)
	}
	other, _ := NewCurveKeyPair()
	if _, err := s.dial(t, "DEALER", ep, s.client, other.Public); !errors.Is(err, ErrCurveServerKey) {
		t.Fatalf("wrong server key: %v", err)
	}
	var me *MechanismError
	if _, err := DialClient(context.Background(), "DEALER", ep, time.Second, ""); !errors.As(err, &me) || me.Server != "CURVE" {
		t.Fatalf("NULL client: %v", err)
	}
	if _, err := DialClient(context.Background(), "SUB", ep, time.Second, ""); err == nil {
		t.Fatal("a SUB got in")
	}
	// Allowed now: the file is read again on the next handshake.
	if err := os.WriteFile(s.allow, []byte(s.client.Public.String()+"\n"+stranger.Public.String()+" stranger\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := s.dial(t, "DEALER", ep, stranger, s.server.Public)
	if err != nil {
		t.Fatalf("stranger after the allow-list changed: %v", err)
	}
	c.Close()
	// A list others could write to is not trusted: the keys read before stay.
	if err := os.Chmod(s.allow, 0o622); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.allow, []byte(s.client.Public.String()+"\n"), 0o622); err != nil {
		t.Fatal(err)
	}
	if c, err = s.dial(t, "DEALER", ep, stranger, s.server.Public); err != nil {
		t.Fatalf("stranger after an unusable change: %v", err)
	}
	c.Close()
	for _, r := range []string{"curve-unknown-client", "curve-hello", "wrong-mechanism"} {
		if s.rejects.count(r) < 1 {
			t.Errorf("%s not counted: %v", r, s.rejects.snapshot())
		}
	}
	assertCurveServes(t, s, ep)
}

// assertCurveServes: a good client still gets an answer.
func assertCurveServes(t *testing.T, s *curveSetup, ep string) {
	t.Helper()
	c, err := s.dial(t, "DEALER", ep, s.client, s.server.Public)
	if err != nil {
		t.Fatalf("the server no longer serves: %v", err)
	}
	defer c.Close()
	if err := c.Send([]byte("still")); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Recv(); err != nil || string(m[0]) != "still" {
		t.Fatalf("echo %q %v", m, err)
	}
}

// rawCurveClient completes the handshake on a raw connection and returns
// the client, whose conn and codec a test may then abuse.
func rawCurveClient(t *testing.T, s *curveSetup, ep string) *Client {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &Client{conn: conn, r: bufio.NewReader(conn), wsem: make(chan struct{}, 1), writeTimeout: time.Second}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.curveHandshake("DEALER", &CurveClient{Server: s.server.Public, Key: s.client}); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitClosed waits until the server closes c's connection.
func waitClosed(t *testing.T, c *Client) {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c.r); err != nil {
		t.Fatalf("connection not closed by the server: %v", err)
	}
}

// TestCurveHostilePeers: replayed and reordered nonces, boxes that do not
// open, garbage and truncated handshakes, and a peer that stalls in the
// handshake are cut off and counted; the server keeps serving.
func TestCurveHostilePeers(t *testing.T) {
	s := newCurveSetup(t)
	pol := s.policy()
	pol.HandshakeTimeout = 300 * time.Millisecond
	ep := curveEchoRouter(t, pol)

	// A replayed MESSAGE.
	c := rawCurveClient(t, s, ep)
	f := c.curve.sealFrame(0, []byte("once"))
	_, _ = c.conn.Write(f)
	if m, err := c.Recv(); err != nil || string(m[0]) != "once" {
		t.Fatalf("first: %q %v", m, err)
	}
	_, _ = c.conn.Write(f)
	waitClosed(t, c)
	// Out of order.
	c = rawCurveClient(t, s, ep)
	f1 := c.curve.sealFrame(0, []byte("one"))
	f2 := c.curve.sealFrame(0, []byte("two"))
	_, _ = c.conn.Write(append(f2, f1...))
	waitClosed(t, c)
	// A box that does not open.
	c = rawCurveClient(t, s, ep)
	bad := c.curve.sealFrame(0, []byte("tampered"))
	bad[len(bad)-3] ^= 0x40
	_, _ = c.conn.Write(bad)
	waitClosed(t, c)
	// Not a MESSAGE at all.
	c = rawCurveClient(t, s, ep)
	_, _ = c.conn.Write(encodeFrame(0, []byte("plain text after CURVE")))
	waitClosed(t, c)
	for _, r := range []string{"curve-replay", "curve-bad-box", "curve-protocol"} {
		if s.rejects.count(r) < 1 {
			t.Errorf("%s not counted: %v", r, s.rejects.snapshot())
		}
	}

	addr := strings.TrimPrefix(ep, "tcp://")
	cg := greeting(mechCurve)
	cg[32] = 0
	garbage := [][]byte{
		append(append([]byte{}, cg...), encodeFrame(flagCommand, []byte("\x05HELLOshort"))...),
		append(append([]byte{}, cg...), encodeFrame(flagCommand, append([]byte(curveHelloName), make([]byte, 194)...))...),
		append(append([]byte{}, cg...), 0x04, 200, 5, 'H'), // (truncated HELLO, then EOF)
		cg[:30],
	}
	for i, g := range garbage {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(g)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Fatalf("garbage %d: not closed: %v", i, err)
		}
		conn.Close()
	}
	// Stalls after WELCOME: cut at the handshake timeout.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h, _ := newCurveClientHandshake(s.server.Public, s.client)
	_, _ = conn.Write(cg)
	_ = writeRawCommand(conn, h.hello())
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		t.Fatalf("stalled handshake not cut: %v", err)
	}
	if s.rejects.count("handshake-timeout-or-eof") < 1 {
		t.Errorf("stall not counted: %v", s.rejects.snapshot())
	}
	assertCurveServes(t, s, ep)
}

// TestCurveKeyFiles: the server's key pair is created once (0600, Z85,
// the public key beside it), read back the same, and refused when others
// can read it.
func TestCurveKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "curve.key")
	kp, created, err := LoadOrCreateCurveKey(path)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	for _, p := range []string{path, CurvePublicPath(path)} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", p, fi.Mode(), err)
		}
	}
	again, created, err := LoadOrCreateCurveKey(path)
	if err != nil || created || again != kp {
		t.Fatalf("reload: %v %v", created, err)
	}
	pub, err := ReadCurvePublicFile(filepath.Join(dir, "curve.pub"))
	if err != nil || pub != kp.Public {
		t.Fatalf("public file: %v %v", pub, err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	var ue *statedir.UnsafePathError
	if _, _, err := LoadOrCreateCurveKey(path); !errors.As(err, &ue) {
		t.Fatalf("group-readable secret key: %v", err)
	}
	_ = os.Chmod(path, 0o600)
	if err := os.WriteFile(path, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCurveKey(path); err == nil {
		t.Fatal("garbage key file accepted")
	}
	link := filepath.Join(dir, "link.key")
	_ = os.Symlink(path, link)
	if _, err := ReadCurveSecretFile(link); err == nil {
		t.Fatal("symlinked key file accepted")
	}
}
