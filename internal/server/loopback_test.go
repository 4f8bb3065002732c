package server

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
)

// TestOpenClawOnLoopbackWithoutToken: on tcp endpoints on loopback, as
// OpenClaw's defaults are, its client (libzmq REQ, mechanism NULL, no
// credentials) is admitted when it runs as the supervisor's uid, without
// --insecure-tcp-no-auth; a client of another uid is refused unless it
// gives the token (or is an --allow-uid); --tcp-loopback-uid=false
// requires the token from everyone.
func TestOpenClawOnLoopbackWithoutToken(t *testing.T) {
	asNobody, py := testenv.Nobody(t)
	if err := exec.Command(py, "-c", "import zmq").Run(); err != nil {
		t.Skip("no /usr/bin/python3 with zmq (apt-get install -y python3-zmq)")
	}
	// A REQ client as OpenClaw's: JSON health, NULL, or PLAIN with the
	// token in argv[2].
	const script = `
import sys, zmq
c = zmq.Context(); s = c.socket(zmq.REQ)
s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 1500)
if len(sys.argv) > 2:
    s.plain_username = b"x"; s.plain_password = sys.argv[2].encode()
s.connect(sys.argv[1])
s.send(b'{"type":"health"}')
try:
    print("REPLY " + s.recv().decode()[:40])
except zmq.Again:
    print("NO-REPLY")
`
	run := func(t *testing.T, nobody bool, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, append([]string{"-c", script}, args...)...)
		if nobody {
			argv := append(append(slices.Clone(asNobody), py, "-c", script), args...)
			cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	const ok = `REPLY {"type":"health","success":true`
	for _, c := range []struct {
		name         string
		tweak        func(*Config)
		ours, nobody string
		nobodyToken  string // uid 65534 with the token (PLAIN)
	}{
		{"defaults", nil, ok, "NO-REPLY", ok},
		// (an admitted uid may still bring the token: its mechanism
		// decides)
		{"uid 65534 allowed", func(c *Config) { c.AllowUIDs = []int{65534} }, ok, ok, ok},
		{"token from everyone", func(c *Config) { c.TCPLoopbackUID = false }, "NO-REPLY", "NO-REPLY", ok},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Control, cfg.Event = tcpPair(t)
			if c.tweak != nil {
				c.tweak(&cfg)
			}
			ts := startServer(t, cfg)
			if got := run(t, false, cfg.Control); !strings.HasPrefix(got, c.ours) {
				t.Fatalf("client of our uid without a token: %q, want %q", got, c.ours)
			}
			if got := run(t, true, cfg.Control); !strings.HasPrefix(got, c.nobody) {
				t.Fatalf("client of uid 65534 without a token: %q, want %q", got, c.nobody)
			}
			if got := run(t, true, cfg.Control, ts.token); !strings.HasPrefix(got, c.nobodyToken) {
				t.Fatalf("client of uid 65534 with the token: %q, want %q", got, c.nobodyToken)
			}
			// A libzmq client of ours with the token is served too.
			if got := run(t, false, cfg.Control, ts.token); !strings.HasPrefix(got, ok) {
				t.Fatalf("client of our uid with the token: %q", got)
			}
			// And our Go client, with the token given explicitly.
			if _, err := ts.client.Health(ctxT(t, 5*time.Second)); err != nil {
				t.Fatalf("Go client with the token: %v", err)
			}
		})
	}
}
