package journal

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestAppendDurableGroupCommit: callers whose lines were written while a
// sync was under way share the next one: 32 lines appended while the
// sync lock is held cost one sync between them, and every line is read
// back by the next run.
func TestAppendDurableGroupCommit(t *testing.T) {
	path := IntentsPath(filepath.Join(t.TempDir(), "journal.json"))
	in, _, err := OpenIntents(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	const n = 32
	in.syncMu.Lock() // (a sync under way)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- in.AppendDurable(intentRec(fmt.Sprintf("j-%d", i), 100+i))
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for last(in) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines appended", last(in), n)
		}
		time.Sleep(time.Millisecond) // (polling for the appends, with a deadline)
	}
	in.syncMu.Unlock()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := in.Syncs.Load(); got != 1 {
		t.Errorf("%d syncs for %d lines appended together, want 1", got, n)
	}
	if err := in.AppendDurable(intentRec("j-after", 200)); err != nil || in.Syncs.Load() != 2 {
		t.Errorf("a line after them: %v, %d syncs (want its own)", err, in.Syncs.Load())
	}
	if rep := reread(t, path); len(rep.Intents) != n+1 {
		t.Errorf("read back %d lines, want %d", len(rep.Intents), n+1)
	}
}

// TestAppendDurableAfterRewrite: a line the file was rewritten with since
// (a compaction, a new generation: the new file is synced whole) needs no
// sync of its own, and is not failed for the old descriptor being closed.
func TestAppendDurableAfterRewrite(t *testing.T) {
	path := IntentsPath(filepath.Join(t.TempDir(), "journal.json"))
	in, _, err := OpenIntents(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	seq, err := in.append(intentRec("j-1", 101))
	if err != nil || seq != 1 {
		t.Fatalf("append: %d, %v", seq, err)
	}
	if err := in.Regenerate(); err != nil {
		t.Fatal(err)
	}
	if err := in.syncThrough(seq); err != nil || in.Syncs.Load() != 0 {
		t.Fatalf("sync of a rewritten line: %v, %d syncs", err, in.Syncs.Load())
	}
	if err := in.AppendDurable(intentRec("j-2", 102)); err != nil || in.Syncs.Load() != 1 {
		t.Fatalf("a line after the rewrite: %v, %d syncs", err, in.Syncs.Load())
	}
	if rep := reread(t, path); len(rep.Intents) != 2 {
		t.Errorf("read back %d lines, want 2", len(rep.Intents))
	}
}
