package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestSymlinkedNotifyDirRefused: a notify directory planted in the state
// directory as a symlink stops the start with an error naming it (as the
// state directory's other paths are refused), and nothing is made or
// removed where it points: not a notify job's socket (mode 0666), not a
// stale socket found there.
func TestSymlinkedNotifyDirRefused(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	target := t.TempDir()
	// A socket nobody listens on: what a start removes from its own notify
	// directory.
	stale := filepath.Join(target, "someones.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: stale}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	link := filepath.Join(cfg.StateDir, "notify")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	s, err := New(cfg, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background())
	if err == nil {
		// (What the start let through: a notify job's socket.)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = s.Close(ctx)
		})
		_, serr := s.jobs.Spawn(protocol.SpawnArgs{Argv: []string{"sleep", "30"}, Notify: true}) // (ended by Close)
		ents, _ := os.ReadDir(target)
		t.Fatalf("started with %s -> %s (spawn: %v); in the target now: %v", link, target, serr, names(ents))
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("start: %v; want a configuration error naming %s as a symlink", err, link)
	}
	ents, _ := os.ReadDir(target)
	if len(ents) != 1 || ents[0].Name() != "someones.sock" {
		t.Fatalf("the symlink's target was changed: %v", names(ents))
	}
	// The refused start let go of the state directory: once the symlink
	// is gone, a start succeeds.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, cfg)
	if _, err := ts.client.Health(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func names(ents []os.DirEntry) []string {
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
