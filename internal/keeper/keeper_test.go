package keeper

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// A supervisor that crashes twice (its crashes counted in a file), then
// exits cleanly: restarted after the backoff, two crash.log entries with
// their last lines, the keeper returns once it exits 0.
func TestRestartsUntilCleanExit(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	// (run n prints its number; runs 1 and 2 die of SIGKILL, run 3 exits 0)
	script := fmt.Sprintf(`echo run >> %[1]s; n=$(wc -l < %[1]s); echo "line of run $n"; [ "$n" -ge 3 ] && exit 0; kill -9 $$`, count)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	start := time.Now()
	err := Run(context.Background(), context.Background(), Config{Argv: []string{"sh", "-c", script}, StateDir: dir,
		Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("two restarts with 10 and 20 ms of backoff took %v", took)
	}
	b, err := os.ReadFile(filepath.Join(dir, "crash.log"))
	if err != nil {
		t.Fatal(err)
	}
	log2 := string(b)
	if strings.Count(log2, "=== CRASH ") != 2 || !strings.Contains(log2, "line of run 2") || !strings.Contains(log2, "Ended: signal killed") {
		t.Fatalf("crash.log:\n%s", log2)
	}
	if fi, err := os.Stat(filepath.Join(dir, "crash.log")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("crash.log mode: %v %v", fi.Mode(), err)
	}
}

// Stopping the keeper sends the supervisor SIGTERM and waits for it.
func TestStopForwardsTerm(t *testing.T) {
	dir := t.TempDir()
	stop, cancel := context.WithCancel(context.Background())
	ready := filepath.Join(dir, "ready")
	script := fmt.Sprintf(`trap 'echo got-term > %s/term; exit 0' TERM; touch %s; while :; do sleep 0.05; done`, dir, ready)
	done := make(chan error, 1)
	go func() {
		done <- Run(stop, context.Background(), Config{Argv: []string{"sh", "-c", script}, StateDir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the supervised command did not start")
		}
		time.Sleep(10 * time.Millisecond) // polling for the file it makes
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "term")); err != nil || strings.TrimSpace(string(b)) != "got-term" {
		t.Fatalf("SIGTERM not forwarded: %q %v", b, err)
	}
}

// The tail keeps the last lines, a long line clipped, a partial line too.
func TestTail(t *testing.T) {
	tl := newTail(3)
	fmt.Fprint(tl, "a\nb\nc\nd\n")
	tl.Write([]byte(strings.Repeat("x", maxLineBytes+10) + "\npart"))
	got := tl.lines()
	if len(got) != 3 || got[0] != "d" || len(got[1]) != maxLineBytes || got[2] != "part" {
		t.Fatalf("lines %q", got)
	}
}
