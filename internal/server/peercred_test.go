package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestIPCPeerCredentials: a client running as another uid is refused on
// ipc even when the socket file is reachable (SO_PEERCRED), unless its uid
// is allowed with --allow-uid.
func TestIPCPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another uid (setpriv)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed: cannot run a client as another uid")
	}
	py, _ := pythonWithZMQ()
	if py == "" {
		t.Skip("no python3 with zmq and msgpack (apt-get install -y python3-zmq python3-msgpack): cannot run a foreign-uid client")
	}
	const nobody = "65534"
	script := `
import sys, zmq, msgpack
c = zmq.Context(); s = c.socket(zmq.REQ)
s.setsockopt(zmq.LINGER, 0); s.setsockopt(zmq.RCVTIMEO, 1500)
s.connect(sys.argv[1])
s.send(msgpack.packb({"v": 2, "id": "x", "op": "health"}, use_bin_type=True))
try:
    r = msgpack.unpackb(s.recv(), raw=False)
    print("REPLY ok=%s" % r["ok"])
except zmq.Again:
    print("NO-REPLY")
`
	for _, allow := range []bool{false, true} {
		cfg := testConfig(t)
		if allow {
			cfg.AllowUIDs = []int{65534}
		}
		ts := startServer(t, cfg)
		// Simulate a careless deployment: the directory and socket are open
		// to everyone, so only the peer-credential check stands in the way.
		sock := strings.TrimPrefix(cfg.Control, "ipc://")
		os.Chmod(filepath.Dir(sock), 0o755)
		os.Chmod(sock, 0o777)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, setpriv, "--reuid="+nobody, "--regid="+nobody, "--clear-groups", py, "-c", script, cfg.Control).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("foreign client: %v\n%s", err, out)
		}
		got := strings.TrimSpace(string(out))
		if allow && got != "REPLY ok=True" {
			t.Fatalf("allowed uid 65534: %q", got)
		}
		if !allow {
			if got != "NO-REPLY" {
				t.Fatalf("uid 65534 must be refused: %q", got)
			}
			if v := value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", "peer-credentials"); v < 1 {
				t.Fatalf("peer-credential rejection not counted: %v", v)
			}
		}
		if _, err := ts.client.Health(ctxT(t, time.Second)); err != nil {
			t.Fatal(err)
		}
	}
}
