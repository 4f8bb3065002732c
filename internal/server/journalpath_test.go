package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// stickyDir is a directory like /tmp: mode 1777.
func stickyDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startErr starts a server on cfg and returns why it would not start
// (nil: it started, and is closed at the end of the test).
func startErr(t *testing.T, cfg Config) error {
	t.Helper()
	s, err := New(cfg, nil)
	if err != nil {
		return err
	}
	if err := s.Start(context.Background()); err != nil {
		return err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return nil
}

// TestJournalInStickyDirectory: --journal in a sticky directory others
// write to (as /tmp/exec-supervisor-journal.json, OpenClaw's default) is
// taken: written there as a file of ours (0600), read back after a
// restart.
func TestJournalInStickyDirectory(t *testing.T) {
	cfg := testConfig(t)
	cfg.Journal = filepath.Join(stickyDir(t), "exec-supervisor-journal.json")
	ts := startServer(t, cfg)
	ctx := ctxT(t, 10*time.Second)
	info, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, ts.client, info.JobID, 10*time.Second)
	eventually(t, 10*time.Second, "the finished job journaled", func() bool {
		doc, err := journal.Read(cfg.Journal)
		return err == nil && len(doc.Jobs) == 1 && doc.Jobs[0].Finished()
	})
	fi, err := os.Lstat(cfg.Journal)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("journal file: %v, %v", fi.Mode(), err)
	}
	if err := ts.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ts2 := startServer(t, cfg)
	if st, err := ts2.client.Status(ctxT(t, 10*time.Second), info.JobID); err != nil || st.JobID != info.JobID {
		t.Fatalf("job after a restart: %+v, %v", st, err)
	}
}

// TestJournalDirectoryRefused: a directory anyone can replace files in
// (world-writable, not sticky) is refused, its real mode in the message;
// the state directory may not even be sticky, and says 1777.
func TestJournalDirectoryRefused(t *testing.T) {
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Journal = filepath.Join(open, "journal.json")
	err := startErr(t, cfg)
	if err == nil || !strings.Contains(err.Error(), "--journal: "+open+" has mode 777: others could replace") {
		t.Fatalf("journal in a mode 777 directory: %v", err)
	}
	if _, err := os.Lstat(cfg.Journal); err == nil {
		t.Fatal("a journal was written there")
	}

	cfg = testConfig(t)
	cfg.StateDir = stickyDir(t)
	err = startErr(t, cfg)
	if err == nil || !strings.Contains(err.Error(), cfg.StateDir+" has mode 1777") {
		t.Fatalf("state directory of mode 1777: %v", err)
	}
}

// TestJournalPathHostile: what someone else put at the journal's paths
// in a sticky directory (a symlink to a file of ours, a file of another
// user, at the journal or its intents) stops the start, naming it, and
// is neither followed, read, moved nor replaced.
func TestJournalPathHostile(t *testing.T) {
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		intents bool // planted at the intents path, not the journal's
		plant   func(t *testing.T, path string)
		want    string
	}{
		{"symlink at the journal", false, func(t *testing.T, path string) {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
		{"symlink at the intents", true, func(t *testing.T, path string) {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
		{"another user's journal", false, func(t *testing.T, path string) { plantForeign(t, path) }, "is owned by uid 65534, not by us"},
		{"another user's intents", true, func(t *testing.T, path string) { plantForeign(t, path) }, "is owned by uid 65534, not by us"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Journal = filepath.Join(stickyDir(t), "journal.json")
			at := cfg.Journal
			if c.intents {
				at = journal.IntentsPath(cfg.Journal)
			}
			c.plant(t, at)
			before, _ := os.Lstat(at)
			err := startErr(t, cfg)
			if err == nil || !strings.Contains(err.Error(), at+" ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("start with %s: %v", c.name, err)
			}
			after, lerr := os.Lstat(at)
			if lerr != nil || !os.SameFile(before, after) {
				t.Fatalf("%s was moved or replaced (%v)", at, lerr)
			}
			if b, _ := os.ReadFile(target); string(b) != "mine" {
				t.Fatalf("the symlink's target was written: %q", b)
			}
			if names, _ := filepath.Glob(at + ".corrupt-*"); len(names) > 0 {
				t.Fatalf("moved aside: %v", names)
			}
		})
	}
}

// plantForeign makes a file of uid 65534 (nobody) at path: root only.
func plantForeign(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file of another user")
	}
	if err := os.WriteFile(path, []byte(`{"version":2,"updatedAtMs":1,"jobs":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil || st.Uid != 65534 {
		t.Fatalf("chown: %v", err)
	}
}
