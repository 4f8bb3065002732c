package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp/zmq4peer"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Hostile peers: each test runs a real job, attacks the supervisor, then
// checks that health answers in under a second, the job was unaffected and
// its output is complete.

func hostileConfig(t *testing.T) Config {
	cfg := testConfig(t)
	cfg.HandshakeTimeout = 300 * time.Millisecond
	cfg.WriteTimeout = 500 * time.Millisecond
	return cfg
}

// witness starts a job printing 0..n-1 over about n*10 ms.
func witness(t *testing.T, ts *testServer, n int) string {
	t.Helper()
	j, err := ts.client.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{
		Shell: fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo $i; i=$((i+1)); sleep 0.01; done", n)})
	if err != nil {
		t.Fatal(err)
	}
	return j.JobID
}

// survived asserts health answers within 1 s and the witness job's output
// is complete.
func survived(t *testing.T, ts *testServer, id string, n int) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := ts.client.Health(ctx); err != nil {
		t.Fatalf("health after the attack: %v (after %v)", err, time.Since(start))
	}
	t.Logf("health answered in %v", time.Since(start))
	out, _, exit, _ := waitDone(t, ts.client, id, 30*time.Second)
	var want strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if out != want.String() || exit.Reason != protocol.ReasonExit {
		t.Fatalf("witness job: reason %s, output %d bytes, want %d", exit.Reason, len(out), want.Len())
	}
}

func dialRaw(t *testing.T, endpoint string) net.Conn {
	t.Helper()
	scheme, addr, err := zmtp.Split(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	network := "tcp"
	if scheme == "ipc" {
		network = "unix"
	}
	c, err := net.DialTimeout(network, addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func greeting(mech string) []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
	copy(g[12:32], mech)
	return g
}

func command(name string, body []byte) []byte {
	b := append([]byte{byte(len(name))}, name...)
	b = append(b, body...)
	return append([]byte{0x04, byte(len(b))}, b...)
}

func readyBody(sockType string) []byte {
	prop := func(k, v string) []byte {
		b := append([]byte{byte(len(k))}, k...)
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(v)))
		return append(append(b, l[:]...), v...)
	}
	return prop("Socket-Type", sockType)
}

// nullHandshake completes a ZMTP NULL handshake on c as a socket of type typ.
func nullHandshake(t *testing.T, c net.Conn, typ string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(greeting("NULL")); err != nil {
		t.Fatal(err)
	}
	var g [64]byte
	if _, err := io.ReadFull(c, g[:]); err != nil {
		t.Fatalf("read server greeting: %v", err)
	}
	if _, err := c.Write(command("READY", readyBody(typ))); err != nil {
		t.Fatal(err)
	}
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("read server READY: %v", err)
	}
	body := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, body); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
}

// expectClosed asserts the server closes c within d.
func expectClosed(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("server did not close the connection within %v", d)
		}
		return
	}
}

func TestHostileFrames(t *testing.T) {
	for _, transport := range []string{"ipc", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			cfg := hostileConfig(t)
			if transport == "tcp" {
				cfg.Control, cfg.Event = tcpPair(t)
				cfg.InsecureTCP = true // raw peers speak NULL; PLAIN is tested separately
			}
			ts := startServer(t, cfg)
			id := witness(t, ts, 100)
			huge := func(size uint64) []byte {
				h := []byte{0x02, 0, 0, 0, 0, 0, 0, 0, 0}
				binary.BigEndian.PutUint64(h[1:], size)
				return h
			}
			typ := map[string]string{cfg.Control: "DEALER", cfg.Event: "SUB"}
			attacks := map[string]func(c net.Conn, ep string){
				"1 TiB frame after handshake": func(c net.Conn, ep string) { nullHandshake(t, c, typ[ep]); c.Write(huge(1 << 40)) },
				"64 MiB frame after handshake": func(c net.Conn, ep string) {
					nullHandshake(t, c, typ[ep])
					c.Write(huge(64 << 20))
					c.Write(make([]byte, 1<<20))
				},
				"1 TiB command during handshake": func(c net.Conn, _ string) {
					c.Write(greeting("NULL"))
					c.Write([]byte{0x06, 0, 0, 1, 0, 0, 0, 0, 0})
				},
				"random bytes": func(c net.Conn, _ string) {
					b := make([]byte, 4096)
					rand.Read(b)
					b[0] = 0x00 // not a signature
					c.Write(b)
				},
				"random bytes after a valid signature": func(c net.Conn, _ string) {
					b := make([]byte, 4096)
					rand.Read(b)
					c.Write(append(greeting("NULL")[:10], b...))
				},
				"truncated greeting": func(c net.Conn, _ string) { c.Write(greeting("NULL")[:20]) },
				"wrong mechanism":    func(c net.Conn, _ string) { c.Write(greeting("CURVE")) },
				"wrong socket type": func(c net.Conn, ep string) {
					c.Write(greeting("NULL"))
					c.Write(command("READY", readyBody("PUSH")))
				},
			}
			for name, attack := range attacks {
				for _, ep := range []string{cfg.Control, cfg.Event} {
					c := dialRaw(t, ep)
					attack(c, ep)
					expectClosed(t, c, 3*time.Second)
				}
				t.Logf("%s: connection closed", name)
			}
			survived(t, ts, id, 100)
			fams := scrape2(t, ts)
			for _, reason := range []string{"frame-too-large", "bad-signature", "handshake-timeout-or-eof", "wrong-mechanism"} {
				if v := value(fams, "exec_supervisor_connections_rejected_total", "reason", reason); v < 1 {
					t.Errorf("rejections for %s not counted (%v)", reason, v)
				}
			}
		})
	}
}

// scrape2 reads the metrics registry directly (this server has no HTTP endpoint).
func scrape2(t *testing.T, ts *testServer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := ts.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

func TestSilentAndManyConnections(t *testing.T) {
	cfg := hostileConfig(t)
	cfg.HandshakeTimeout = 5 * time.Second // silence must not block others even while it lasts
	ts := startServer(t, cfg)
	id := witness(t, ts, 100)
	// One silent connection held open, then 500 opened at once.
	silent := dialRaw(t, cfg.Control)
	_ = silent
	var conns []net.Conn
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scheme, addr, _ := zmtp.Split(cfg.Control)
			_ = scheme
			c, err := net.DialTimeout("unix", addr, 2*time.Second)
			if err == nil {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	t.Logf("%d silent connections open", len(conns)+1)
	// A new client is served at once, while all of them stay silent.
	survived(t, ts, id, 100)
}

// TestDealerFloodNeverReading: a DEALER that floods requests and never
// reads its replies is disconnected once a write to it times out or its
// unsent replies pass their bound; others are served afterwards.
func TestDealerFloodNeverReading(t *testing.T) {
	cfg := hostileConfig(t)
	ts := startServer(t, cfg)
	id := witness(t, ts, 150)
	c := dialRaw(t, cfg.Control)
	nullHandshake(t, c, "DEALER")
	body, _ := protocol.EncodeRequest("flood", protocol.OpStatus, nil)
	msg := append([]byte{0x01, 0x00}, append([]byte{0x00, byte(len(body))}, body...)...)
	if len(body) > 255 {
		t.Fatalf("request too long for a short frame: %d", len(body))
	}
	// Make replies big: status of all jobs, with 40 jobs known.
	for i := 0; i < 40; i++ {
		if _, err := ts.client.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{Argv: []string{"true"}, Labels: map[string]string{"pad": strings.Repeat("x", 200)}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for i := 0; i < 20000; i++ {
			if _, err := c.Write(msg); err != nil {
				return // cut off: expected
			}
		}
	}()
	<-done
	expectClosed(t, c, 10*time.Second)
	survived(t, ts, id, 150)
	// (cut off as its writes time out, or once 32 MiB of replies wait
	// behind the one being written: whichever comes first, as fast as
	// the replies are made)
	fams := scrape2(t, ts)
	if v := value(fams, "exec_supervisor_connections_rejected_total", "reason", "slow-peer-write-timeout") +
		value(fams, "exec_supervisor_connections_rejected_total", "reason", "slow-peer-queue"); v < 1 {
		t.Fatalf("slow peer not counted: %v", v)
	}
}

// TestPlainAuthGoClient: over tcp a Go client with the right token is
// served; a wrong or missing token never gets a reply.
func TestPlainAuthGoClient(t *testing.T) {
	cfg := hostileConfig(t)
	cfg.Control, cfg.Event = tcpPair(t)
	cfg.TCPLoopbackUID = false // (else our uid on loopback needs no token)
	ts := startServer(t, cfg)
	if ts.token == "" {
		t.Fatal("tcp server started without a token")
	}
	id := witness(t, ts, 50)
	for _, tok := range []string{"", "wrong", ts.token + "x"} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := zmq4peer.DialToken(ctx, zmq4peer.Dealer, cfg.Control, time.Second, tok)
		if err == nil {
			body, _ := protocol.EncodeRequest("x", protocol.OpHealth, nil)
			_ = s.Send(zmq4peer.NewMsg(nil, body))
			got := make(chan struct{})
			go func() {
				if _, err := s.Recv(); err == nil {
					close(got)
				}
			}()
			select {
			case <-got:
				t.Errorf("token %q got a reply", tok)
			case <-time.After(500 * time.Millisecond):
			}
			s.Close()
		}
		cancel()
	}
	// Raw: a PLAIN HELLO with a bad password gets a ZMTP ERROR.
	c := dialRaw(t, cfg.Control)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	c.Write(greeting("PLAIN"))
	var g [64]byte
	if _, err := io.ReadFull(c, g[:]); err != nil {
		t.Fatal(err)
	}
	c.Write(command("HELLO", []byte("\x01u\x03bad")))
	rest, _ := io.ReadAll(c)
	if !bytes.Contains(rest, []byte("ERROR")) || !bytes.Contains(rest, []byte("authentication failed")) {
		t.Fatalf("no ZMTP ERROR for a bad password: %q", rest)
	}
	survived(t, ts, id, 50)
	if v := value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", "auth-failed"); v < 3 {
		t.Fatalf("auth failures counted: %v", v)
	}
}

// TestRejectionCountedOnce: a peer refused during its handshake is
// counted once, under its reason (a metrics audit saw every
// incompatible-socket-type refusal counted a second time as "handshake").
func TestRejectionCountedOnce(t *testing.T) {
	cfg := hostileConfig(t)
	ts := startServer(t, cfg)
	for _, ep := range []string{cfg.Control, cfg.Event} {
		c := dialRaw(t, ep)
		c.Write(greeting("NULL"))
		c.Write(command("READY", readyBody("PUSH")))
		expectClosed(t, c, 3*time.Second)
	}
	eventually(t, 5*time.Second, "both refusals counted", func() bool {
		return value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", "incompatible-socket-type") == 2
	})
	if v := value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", "handshake"); v > 0 {
		t.Fatalf("also counted as handshake: %v", v)
	}
}
