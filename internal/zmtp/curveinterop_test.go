package zmtp

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// pyCurve runs python3 code with pyzmq (skipping without it) and returns
// its stdout lines as they come; the process is killed when t ends.
func pyCurve(t *testing.T, ctx context.Context, code string, args ...string) *bufio.Reader {
	t.Helper()
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import zmq,sys; sys.exit(0 if zmq.has('curve') else 1)").Run(); err != nil {
		t.Skip("no pyzmq with CURVE")
	}
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", code}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return bufio.NewReader(out)
}

func readLine(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatalf("python: %v (line %q)", err, line)
	}
	return strings.TrimSpace(line)
}

// TestCurvePyzmqClients: libzmq REQ and SUB sockets with CURVE keys
// talk to our ROUTER and PUB; a libzmq client with a key not in the
// allow-list, or with another server key, gets nothing.
func TestCurvePyzmqClients(t *testing.T) {
	s := newCurveSetup(t)
	ctl := curveEchoRouter(t, s.policy())
	pub, err := ListenPub(context.Background(), "tcp://127.0.0.1:0", s.policy(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	stranger, _ := NewCurveKeyPair()
	other, _ := NewCurveKeyPair()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := `
import zmq, sys
ctl, ev, spub, cpub, csec, stranger_pub, stranger_sec, other_pub = sys.argv[1:]
c = zmq.Context()
def sock(t, server, pub, sec):
    s = c.socket(t)
    s.curve_serverkey = server.encode(); s.curve_publickey = pub.encode(); s.curve_secretkey = sec.encode()
    s.linger = 0; s.rcvtimeo = 5000
    return s
r = sock(zmq.REQ, spub, cpub, csec); r.connect(ctl)
r.send_multipart([b"ping", b"x" * 300])
m = r.recv_multipart()
print("req", m[0].decode(), len(m[1]), flush=True)
sub = sock(zmq.SUB, spub, cpub, csec); sub.setsockopt(zmq.SUBSCRIBE, b"job/"); sub.connect(ev)
print("subscribed", flush=True)
m = sub.recv_multipart()
print("sub", m[0].decode(), m[1].decode(), flush=True)
for name, (server, pub, sec) in {"stranger": (spub, stranger_pub, stranger_sec), "wrongserver": (other_pub, cpub, csec)}.items():
    s = sock(zmq.REQ, server, pub, sec); s.rcvtimeo = 700; s.connect(ctl)
    s.send(b"hello?")
    try:
        s.recv(); print(name, "answered", flush=True)
    except zmq.Again:
        print(name, "refused", flush=True)
`
	br := pyCurve(t, ctx, code, ctl, "tcp://"+pub.Addr().String(), s.server.Public.String(), s.client.Public.String(), s.client.Secret.String(),
		stranger.Public.String(), stranger.Secret.String(), other.Public.String())
	if got := readLine(t, br); got != "req ping 300" {
		t.Fatalf("REQ: %q", got)
	}
	if got := readLine(t, br); got != "subscribed" {
		t.Fatalf("SUB: %q", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !pub.subscribed("job/") {
		if time.Now().After(deadline) {
			t.Fatal("libzmq's subscription never arrived")
		}
		time.Sleep(5 * time.Millisecond) // (polled: no notification for a subscription)
	}
	_ = pub.SendParts([]byte("job/1"), []byte("output"))
	if got := readLine(t, br); got != "sub job/1 output" {
		t.Fatalf("SUB: %q", got)
	}
	for _, want := range []string{"stranger refused", "wrongserver refused"} {
		if got := readLine(t, br); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	if s.rejects.count("curve-unknown-client") < 1 || s.rejects.count("curve-hello") < 1 {
		t.Errorf("refusals not counted: %v", s.rejects.snapshot())
	}
}

// TestCurveClientAgainstLibzmq: our client against a libzmq CURVE ROUTER
// (pyzmq, no ZAP: any client key), and against one whose key is not the
// one we pinned (libzmq closes at our HELLO: ErrCurveServerKey).
func TestCurveClientAgainstLibzmq(t *testing.T) {
	server, _ := NewCurveKeyPair()
	client, _ := NewCurveKeyPair()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := `
import zmq, sys
c = zmq.Context()
s = c.socket(zmq.ROUTER); s.curve_server = True; s.curve_secretkey = sys.argv[1].encode(); s.linger = 0
p = s.bind_to_random_port("tcp://127.0.0.1")
print(p, flush=True)
while True:
    m = s.recv_multipart()
    s.send_multipart([m[0], b"pong"] + m[1:])
`
	br := pyCurve(t, ctx, code, server.Secret.String())
	ep := "tcp://127.0.0.1:" + readLine(t, br)
	c, err := DialClientWith(ctx, "DEALER", ep, DialOptions{Timeout: 5 * time.Second, Curve: &CurveClient{Server: server.Public, Key: client}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 3; i++ {
		if err := c.Send([]byte("ping"), make([]byte, 1000*i)); err != nil {
			t.Fatal(err)
		}
		m, err := c.Recv()
		if err != nil || len(m) != 3 || string(m[0]) != "pong" || len(m[2]) != 1000*i {
			t.Fatalf("reply %d: %d frames, %v", i, len(m), err)
		}
	}
	other, _ := NewCurveKeyPair()
	_, err = DialClientWith(ctx, "DEALER", ep, DialOptions{Timeout: 5 * time.Second, Curve: &CurveClient{Server: other.Public, Key: client}})
	if err == nil || !strings.Contains(err.Error(), ErrCurveServerKey.Error()) {
		t.Fatalf("wrong server key against libzmq: %v", err)
	}
}
