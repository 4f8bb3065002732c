package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
)

// asNobody runs python3 code as uid 65534 (setpriv) with args, or skips
// the test where that cannot be done.
func asNobody(t *testing.T, ctx context.Context, code string, args ...string) *exec.Cmd {
	t.Helper()
	nobody, py := testenv.Nobody(t)
	argv := append(append(nobody, py, "-c", code), args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// greetingOf is a raw ZMTP peer: it connects to argv[1] from its own
// socket, sends its signature and prints the mechanism of the server's
// greeting, then, offering NULL, whether the server sent READY or ERROR.
const greetingOf = `
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=5)
s.sendall(b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03")
g = b""
while len(g) < 64:
    d = s.recv(64 - len(g))
    if not d: break
    g += d
print(g[12:32].rstrip(b"\x00").decode())
s.sendall(b"\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32)
meta = b"\x0bSocket-Type" + (6).to_bytes(4, "big") + b"DEALER"
body = b"\x05READY" + meta
s.sendall(bytes([0x04, len(body)]) + body)
r = s.recv(256)
print("READY" if b"READY" in r else "ERROR" if b"ERROR" in r else "CLOSED")
`

// TestLoopbackUIDs: with a token and LoopbackUIDs, a tcp peer on
// loopback of our uid gets a NULL greeting and needs no token; one of
// another uid gets PLAIN and is refused without it, unless its uid is
// allowed. Without LoopbackUIDs everyone gets PLAIN.
func TestLoopbackUIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		name     string
		policy   Policy
		ours     string // our client without a token: "" connects, else the MechanismError's server
		nobody   string // the mechanism uid 65534 is offered, and what NULL gets it
		rejected bool
	}{
		{"loopback uids", Policy{Token: "tok", LoopbackUIDs: true}, "", "PLAIN ERROR", true},
		{"loopback uids, 65534 allowed", Policy{Token: "tok", LoopbackUIDs: true, AllowUIDs: []int{65534}}, "", "NULL READY", false},
		{"token from everyone", Policy{Token: "tok"}, "PLAIN", "PLAIN ERROR", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var rejects []string
			pol := c.policy
			pol.OnReject = func(r string) { mu.Lock(); rejects = append(rejects, r); mu.Unlock() }
			r, err := ListenRouter(ctx, "tcp://127.0.0.1:0", &pol, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ep := "tcp://" + r.Addr().String()
			cl, err := DialClientWith(ctx, "DEALER", ep, DialOptions{})
			var me *MechanismError
			switch {
			case c.ours == "" && err != nil:
				t.Fatalf("our uid without a token: %v", err)
			case c.ours != "" && (!errors.As(err, &me) || me.Server != c.ours):
				t.Fatalf("our uid without a token: %v, want a MechanismError from a %s server", err, c.ours)
			}
			if cl != nil {
				cl.Close()
			}
			// Given the token explicitly, we connect either way.
			cl, err = DialClientWith(ctx, "DEALER", ep, DialOptions{Token: "tok"})
			if err != nil {
				t.Fatalf("our uid with the token: %v", err)
			}
			cl.Close()

			out, err := asNobody(t, ctx, greetingOf, r.Addr().String()).CombinedOutput()
			if err != nil {
				t.Fatalf("peer as uid 65534: %v\n%s", err, out)
			}
			if got := strings.Join(strings.Fields(string(out)), " "); got != c.nobody {
				t.Fatalf("peer as uid 65534: %q, want %q", got, c.nobody)
			}
			mu.Lock()
			defer mu.Unlock()
			if c.rejected && !slices.Contains(rejects, "wrong-mechanism") {
				t.Fatalf("refusal not counted: %v", rejects)
			}
		})
	}
}

// TestLoopbackServerOfAnotherUser: a token given explicitly is not
// dropped for a server on loopback that offers NULL but is another
// user's: that is a *MechanismError, as any server without
// authentication where one was expected.
func TestLoopbackServerOfAnotherUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close() // (the port for the foreign server; reuse is immediate)
	const server = `
import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1]))); l.listen(1)
print("listening", flush=True)
c, _ = l.accept()
c.sendall(b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32)
c.recv(64)
`
	cmd := asNobody(t, ctx, server, fmt.Sprint(port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	buf := make([]byte, 64)
	if n, _ := stdout.Read(buf); !strings.Contains(string(buf[:n]), "listening") {
		t.Fatalf("foreign server: %q", buf[:n])
	}
	_, err = DialClientWith(ctx, "DEALER", fmt.Sprintf("tcp://127.0.0.1:%d", port), DialOptions{Token: "tok"})
	var me *MechanismError
	if !errors.As(err, &me) || me.Server != "NULL" {
		t.Fatalf("explicit token to another user's NULL server: %v", err)
	}
}
