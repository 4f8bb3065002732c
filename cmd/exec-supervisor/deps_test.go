package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinariesLinkNoZmq4: the supervisor and execctl speak ZeroMQ through
// our own ZMTP (internal/zmtp) only. go-zeromq/zmq4 is the reference peer
// the tests check it against (internal/zmtp/zmq4peer) and must not reach
// a production binary.
func TestBinariesLinkNoZmq4(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	const module = "github.com/exec-supervisor/exec-supervisor/"
	for _, bin := range []string{"cmd/exec-supervisor", "cmd/execctl"} {
		out, err := exec.Command(goTool, "list", "-deps", module+bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", bin, err, out)
		}
		for _, p := range strings.Fields(string(out)) {
			if strings.HasPrefix(p, "github.com/go-zeromq/") || p == module+"internal/zmtp/zmq4peer" {
				t.Errorf("%s links %s", bin, p)
			}
		}
	}
}
