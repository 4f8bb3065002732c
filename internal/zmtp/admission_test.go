package zmtp

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
)

// pyzmqServer starts a libzmq ROUTER (pyzmq) bound on loopback, optionally
// as another user (prefix, e.g. setpriv), PLAIN server when plain; it echoes
// the first message it gets on stdout. It returns the port.
func pyzmqServer(t *testing.T, ctx context.Context, prefix []string, plain bool) (string, *bufio.Reader) {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import zmq").Run(); err != nil {
		t.Skip("no pyzmq")
	}
	script := "import zmq,sys\nc=zmq.Context()\ns=c.socket(zmq.ROUTER)\n"
	if plain {
		script += "from zmq.auth.thread import ThreadAuthenticator\na=ThreadAuthenticator(c)\na.start()\na.configure_plain(domain='*',passwords={'exec-supervisor':'tok'})\ns.plain_server=True\n"
	}
	script += "p=s.bind_to_random_port('tcp://127.0.0.1')\nprint(p,flush=True)\nm=s.recv_multipart()\nprint(repr(m[1:]),flush=True)\ns.send_multipart([m[0],b'pong'])\nimport time; time.sleep(5)\n"
	args := append(append([]string{}, prefix...), py, "-c", script)
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	br := bufio.NewReader(out)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line), br
}

// TestLibzmqInterop: our client against libzmq 4.3 servers (NULL and
// PLAIN) completes the handshake and exchanges a message.
func TestLibzmqInterop(t *testing.T) {
	for _, plain := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		port, br := pyzmqServer(t, ctx, nil, plain)
		o := DialOptions{Timeout: 3 * time.Second}
		if plain {
			o.Token = "tok"
		}
		c, err := DialClientWith(ctx, "DEALER", "tcp://127.0.0.1:"+port, o)
		if err != nil {
			t.Fatalf("plain=%v: %v", plain, err)
		}
		if err := c.Send([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		got, err := c.Recv()
		if err != nil || string(got[len(got)-1]) != "pong" {
			t.Fatalf("plain=%v: %q %v", plain, got, err)
		}
		line, _ := br.ReadString('\n')
		t.Logf("plain=%v: server got %s", plain, strings.TrimSpace(line))
		c.Close()
		cancel()
	}
}

// TestFoundTokenRefusesForeignNullListener: with a token found by itself
// (the default token file), the client refused before 9b0bcb3 any tcp
// listener not of our uid (ownListener ran right after connecting). Now
// the check runs only where the token would be sent, so a squatter that
// greets NULL gets the connection and the client's requests.
func TestFoundTokenRefusesForeignNullListener(t *testing.T) {
	nobody, _ := testenv.Nobody(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	port, br := pyzmqServer(t, ctx, nobody, false)
	c, err := DialClientWith(ctx, "DEALER", "tcp://127.0.0.1:"+port, DialOptions{Token: "tok", TokenToOwnOnly: true, Timeout: 3 * time.Second})
	if err == nil {
		defer c.Close()
		_ = c.Send([]byte(`{"op":"spawn","env":{"SECRET":"x"}}`))
		line, _ := br.ReadString('\n')
		t.Fatalf("connected to another user's NULL listener with a found token; it received %s", strings.TrimSpace(line))
	}
	t.Logf("refused: %v", err)
}

// TestForeignNewcomerPastReserveEvictsNothing: with the operator's reserve in use
// (more than MaxConns established), a newcomer of another uid evicts idle
// connections (up to 3) and is then refused anyway: each eviction leaves
// conns above MaxConns, so no retry of admit can succeed.
func TestForeignNewcomerPastReserveEvictsNothing(t *testing.T) {
	nobody, py := testenv.Nobody(t)
	if err := exec.Command(py, "-c", "import zmq").Run(); err != nil {
		t.Skip("no pyzmq")
	}
	rej := newRejections()
	r, err := ListenRouter(context.Background(), "tcp://127.0.0.1:0", &Policy{MaxConns: 2, OwnReserve: 2, IdleEvictAfter: 300 * time.Millisecond, OnReject: rej.add}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetHandler(func(in Incoming) {
		in.Peer.Release()
		_ = r.Send(in.Peer, [][]byte{[]byte("ok")})
	})
	endpoint := "tcp://" + r.Addr().String()
	var clients []*Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for i := 0; i < 4; i++ { // MaxConns, then the reserve (ours, none idle yet)
		c, err := DialClient(context.Background(), "DEALER", endpoint, 2*time.Second, "")
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		clients = append(clients, c)
	}
	time.Sleep(700 * time.Millisecond) // all four idle now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nobody[0], append(nobody[1:], py, "-c",
		"import zmq,time\nc=zmq.Context()\ns=c.socket(zmq.DEALER)\ns.connect('"+endpoint+"')\ns.send(b'hi')\ntime.sleep(1.5)\n")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("foreign client: %v %s", err, out)
	}
	ev, refused := rej.count("evicted-idle"), rej.count("too-many-connections")
	t.Logf("evicted-idle=%d too-many-connections=%d", ev, refused)
	if ev > 0 && refused > 0 {
		t.Fatalf("the foreign newcomer evicted %d idle connections and was refused %d times: evictions that made no room", ev, refused)
	}
}

// TestConnCountBalancedUnderChurn: handshakes displaced, refused, cut off
// and completed concurrently leave the established count at zero and the
// pending set empty once every peer is gone.
func TestConnCountBalancedUnderChurn(t *testing.T) {
	r, err := ListenRouter(context.Background(), "tcp://127.0.0.1:0", &Policy{MaxConns: 6, MaxHandshakes: 4, OwnReserve: 2, HandshakeTimeout: time.Second, IdleEvictAfter: 50 * time.Millisecond}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.SetHandler(func(in Incoming) {
		in.Peer.Release()
		_ = r.Send(in.Peer, [][]byte{[]byte("ok")})
	})
	addr := r.Addr().String()
	done := make(chan struct{})
	for g := 0; g < 24; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 15; i++ {
				switch (g + i) % 4 {
				case 0, 1:
					c, err := DialClient(context.Background(), "DEALER", "tcp://"+addr, time.Second, "")
					if err == nil {
						_ = c.Send([]byte("x"))
						_, _ = c.Recv()
						time.Sleep(time.Duration(g%5) * 20 * time.Millisecond)
						c.Close()
					}
				case 2:
					c, err := net.Dial("tcp", addr)
					if err == nil {
						_, _ = c.Write([]byte{0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3})
						time.Sleep(30 * time.Millisecond)
						c.Close()
					}
				case 3:
					c, err := net.Dial("tcp", addr)
					if err == nil {
						time.Sleep(10 * time.Millisecond)
						c.Close()
					}
				}
			}
		}(g)
	}
	for g := 0; g < 24; g++ {
		<-done
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.l.pmu.Lock()
		p, d := len(r.l.pending), len(r.l.displaced)
		r.l.pmu.Unlock()
		n := r.l.conns.Load()
		if n == 0 && p == 0 && d == 0 && r.Peers() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after all peers left: conns=%d pending=%d displaced=%d peers=%d", n, p, d, r.Peers())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
