package server

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestHealthReportsIntentFailures: while job starts cannot be recorded in
// the journal's intents (here the file made immutable, which binds root
// too), health's journalError says so (a crash then loses those jobs) and
// each such start is counted; once they can, it is clear again.
func TestHealthReportsIntentFailures(t *testing.T) {
	cfg := testConfig(t)
	ts := startServer(t, cfg)
	ctx := ctxT(t, 30*time.Second)
	path := journal.IntentsPath(cfg.JournalPath())
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("chattr +i %s: %v %s (needs root and a filesystem with attributes)", path, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", path).Run() })
	spawnTrue := func() {
		t.Helper()
		if _, fin, err := ts.client.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "0.05"}}, 10*time.Second); err != nil || !fin {
			t.Fatalf("spawn: %v %v", fin, err)
		}
	}
	spawnTrue()
	h, err := ts.client.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.JournalError, "intents not written since") || ts.jw.intents.Failures.Load() != 1 {
		t.Fatalf("health while intents fail: journalError %q, failures %d", h.JournalError, ts.jw.intents.Failures.Load())
	}
	if err := exec.Command("chattr", "-i", path).Run(); err != nil {
		t.Fatal(err)
	}
	spawnTrue()
	if h, err := ts.client.Health(ctx); err != nil || h.JournalError != "" {
		t.Fatalf("health once intents are written again: %q %v", h.JournalError, err)
	}
}
