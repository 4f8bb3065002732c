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
// is allowed with --allow-uid, or one of its groups (primary or
// supplementary) with --allow-gid. An allowed peer needs no chmod by the
// operator: the supervisor opens the socket and its directory to it.
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
	for _, c := range []struct {
		name   string
		uids   []int
		gids   []int
		groups string // the client's supplementary groups
		want   string
	}{
		{"not allowed", nil, nil, "", "NO-REPLY"},
		{"allowed uid", []int{65534}, nil, "", "REPLY ok=True"},
		{"allowed supplementary gid", nil, []int{4242}, "4242", "REPLY ok=True"},
		{"allowed gid, not the client's", nil, []int{4242}, "", "NO-REPLY"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.AllowUIDs, cfg.AllowGIDs = c.uids, c.gids
			ts := startServer(t, cfg)
			sock := strings.TrimPrefix(cfg.Control, "ipc://")
			if c.uids == nil && c.gids == nil {
				// Simulate a careless deployment: the directory and socket
				// are open to everyone, so only the peer-credential check
				// stands in the way.
				os.Chmod(filepath.Dir(sock), 0o755)
				os.Chmod(sock, 0o777)
			}
			groups := "--clear-groups"
			if c.groups != "" {
				groups = "--groups=" + c.groups
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			out, err := exec.CommandContext(ctx, setpriv, "--reuid="+nobody, "--regid="+nobody, groups, py, "-c", script, cfg.Control).CombinedOutput()
			cancel()
			if err != nil {
				t.Fatalf("foreign client: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != c.want {
				t.Fatalf("client as uid %s (groups %q): %q, want %q", nobody, c.groups, got, c.want)
			}
			if c.name == "not allowed" {
				if v := value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", "peer-credentials"); v < 1 {
					t.Fatalf("peer-credential rejection not counted: %v", v)
				}
			}
			if _, err := ts.client.Health(ctxT(t, time.Second)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
