package outlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// heldDirStore returns a store whose writers stop before making a job's
// directory until release is closed; entered tells when one did.
func heldDirStore(t *testing.T, cfg Config) (s *Store, entered <-chan string, release chan struct{}) {
	t.Helper()
	cfg.Dir = filepath.Join(t.TempDir(), "out")
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	in := make(chan string, 1)
	release = make(chan struct{})
	s.dirHook = func(id string) {
		in <- id
		<-release
	}
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return s, in, release
}

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestOutputNotHeldByDirectoryIO: while the writer's goroutine is held
// in its directory I/O (replacing an earlier job's directory, making the
// new one), the job's output path (Append, Skip, Behind, Queued) and
// reads of the queued output go on.
func TestOutputNotHeldByDirectoryIO(t *testing.T) {
	s, entered, release := heldDirStore(t, Config{SegmentBytes: 4096, MaxBytes: 8192})
	old := filepath.Join(s.Dir(), "j1")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "stale"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := s.Open("j1", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	var off int64
	add := func(i int) {
		d := []byte(fmt.Sprintf("line %04d of the job's output\n", i))
		w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: uint64(i + 1), Offset: off, Data: d}, int64(i), 0)
		want = append(want, d...)
		off += int64(len(d))
	}
	add(0)
	if id := waitFor(t, entered, "the writer's directory I/O"); id != "j1" {
		t.Fatalf("directory I/O of %q", id)
	}
	done := make(chan error, 1)
	go func() {
		// (more than a segment: the writer will rotate once released)
		for i := 1; i < 400; i++ {
			add(i)
			_ = w.Behind()
		}
		if q := w.Queued(); q == 0 {
			done <- errors.New("nothing queued")
			return
		}
		r, err := w.Read(0, off, 1<<20)
		if err != nil {
			done <- err
			return
		}
		var got []byte
		for _, c := range r.Chunks {
			got = append(got, c.Data...)
		}
		if !bytes.Equal(got, want) {
			done <- fmt.Errorf("read back from the queue %d bytes, want %d", len(got), len(want))
			return
		}
		done <- w.Err()
	}()
	if err := waitFor(t, done, "the output path while the directory I/O is held"); err != nil {
		t.Fatal(err)
	}
	close(release)
	written(t, w)
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(old, "stale")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the earlier job's file: %v", err)
	}
	// The oldest segments rotated away (MaxBytes): what is left is the
	// tail of the output, byte-exact.
	r, err := w.Read(0, off, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, c := range r.Chunks {
		got = append(got, c.Data...)
	}
	if r.Lost == 0 || r.Lost+int64(len(got)) != off || !bytes.Equal(got, want[r.Lost:]) {
		t.Fatalf("read back %d bytes (lost %d), output %d bytes", len(got), r.Lost, off)
	}
}

// TestRemoveDuringDirectoryIO: a job removed while its writer is making
// its directory has no files afterwards (the writer makes nothing more).
func TestRemoveDuringDirectoryIO(t *testing.T) {
	s, entered, release := heldDirStore(t, Config{})
	w, err := s.Open("j2", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Begin(protocol.JobInfo{JobID: "j2", Name: "svc", State: protocol.StateStarting})
	w.Append(protocol.Chunk{Stream: protocol.Stderr, Seq: 1, Data: []byte("out")}, 1, 0)
	waitFor(t, entered, "the writer's directory I/O")
	removed := make(chan error, 1)
	go func() { removed <- w.Remove() }()
	close(release)
	if err := waitFor(t, removed, "Remove"); err != nil {
		t.Fatal(err)
	}
	written(t, w)
	if _, err := os.Lstat(filepath.Join(s.Dir(), "j2")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the removed job's directory: %v", err)
	}
	if s.Has("j2") {
		t.Fatal("Has a removed job")
	}
}

// TestStallDuringDirectoryIO: a writer held in its directory I/O past
// its stall limit while the job's output piles up gives up its disk
// output (memory only, reported, OnRoom) without waiting for the I/O.
func TestStallDuringDirectoryIO(t *testing.T) {
	failed := make(chan error, 1)
	s, entered, release := heldDirStore(t, Config{StallLimit: time.Millisecond, OnError: func(_ string, err error) { failed <- err }})
	room := make(chan struct{}, 1)
	w, err := s.Open("j3", true, func() { room <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: 1, Data: []byte("first")}, 1, 0)
	waitFor(t, entered, "the writer's directory I/O")
	w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: 2, Offset: 5, Data: make([]byte, highWater)}, 2, 0)
	if err := waitFor(t, failed, "the stall report"); !errors.Is(err, ErrStalled) {
		t.Fatalf("reported %v, want ErrStalled", err)
	}
	waitFor(t, room, "OnRoom")
	if !errors.Is(w.Err(), ErrStalled) || w.Behind() || w.Queued() != 0 {
		t.Fatalf("after the stall: err %v, behind %v, queued %d", w.Err(), w.Behind(), w.Queued())
	}
	close(release)
	written(t, w)
	if err := w.Remove(); err != nil {
		t.Fatal(err)
	}
}
