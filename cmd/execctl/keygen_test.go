package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
)

// TestCurveKeygen: curve-keygen writes a key pair (secret 0600, public
// beside it) and prints the public key; it never writes over a key; a
// supervisor that admits the printed key serves execctl using the pair
// over CURVE, and one that does not refuses it.
func TestCurveKeygen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "client.key")
	code, out, errs := execctl(t, "curve-keygen", key)
	pub := strings.TrimSpace(out)
	if code != 0 || len(pub) != 40 {
		t.Fatalf("curve-keygen: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, p := range []string{key, filepath.Join(dir, "client.pub")} {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v", p, fi, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "client.pub")); !strings.Contains(string(b), pub) {
		t.Fatalf("client.pub does not hold the printed key %s:\n%s", pub, b)
	}
	if code, _, errs := execctl(t, "curve-keygen", key); code == 0 || !strings.Contains(errs, "exists") {
		t.Fatalf("curve-keygen over an existing key: exit %d, %q", code, errs)
	}
	if code, _, _ := execctl(t, "curve-keygen", filepath.Join(dir, "noext")); code == 0 {
		t.Fatal("curve-keygen of a file not ending in .key")
	}

	clients := filepath.Join(dir, "curve-clients")
	s := startSupervisorWith(t, func(c *server.Config) {
		c.Control = "tcp://127.0.0.1:0"
		c.TCPLoopbackUID = false
		c.Curve, c.CurveClientsFile = true, clients
	})
	ctl := "tcp://" + s.srv.Addr().String()
	serverPub := filepath.Join(s.dir, "state", "curve.pub") // (made at its start)
	args := []string{"--control", ctl, "--curve-server-key-file", serverPub, "--curve-key-file", key, "health"}
	if code, _, errs := execctl(t, args...); code == 0 || !strings.Contains(strings.ToLower(errs), "curve") {
		t.Fatalf("health with a key the supervisor does not admit: exit %d, %q", code, errs)
	}
	if err := os.WriteFile(clients, []byte("# the test's client\n"+pub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := execctl(t, args...); code != 0 || !strings.HasPrefix(out, "ok:") {
		t.Fatalf("health over CURVE with the admitted key: exit %d, %q, %q", code, out, errs)
	}
}
