package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoEngine: pkg/client is only a client. Of this module it may
// link the wire (pkg/protocol), the transport (internal/zmtp) and the
// checks of the directories and files it trusts (internal/statedir) only,
// and no engine dependency (PTYs, metrics): the in-process engine is
// pkg/local's. (Importing the client linked the whole job engine: a
// 40-line client program built to 5 MB.) Nor does it link
// go-zeromq/zmq4: our ZMTP is the only ZeroMQ a client carries (zmq4 is
// the tests' reference peer). A package added here on purpose belongs in
// allowed below.
func TestLinksNoEngine(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	const module = "github.com/exec-supervisor/exec-supervisor/"
	allowed := map[string]bool{module + "pkg/client": true, module + "pkg/protocol": true, module + "internal/zmtp": true, module + "internal/statedir": true}
	banned := []string{"github.com/creack/pty", "github.com/prometheus/", "github.com/spf13/pflag", "github.com/go-zeromq/"}
	out, err := exec.Command(goTool, "list", "-deps", module+"pkg/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, module) && !allowed[p] {
			t.Errorf("pkg/client links %s", p)
		}
		for _, b := range banned {
			if strings.HasPrefix(p, b) {
				t.Errorf("pkg/client links %s", p)
			}
		}
	}
}
