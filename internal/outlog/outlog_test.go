package outlog

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func testStore(t *testing.T, seg, maxBytes int64) *Store {
	t.Helper()
	s, err := Open(Config{Dir: filepath.Join(t.TempDir(), "out"), SegmentBytes: seg, MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// written waits (with a deadline) until w has written what it queued.
func written(t *testing.T, w *Writer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		idle := !w.running && len(w.queue) == 0
		w.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("writer did not drain")
		}
		time.Sleep(time.Millisecond) // (the writer has no completion event to wait on)
	}
}

func readAll(t *testing.T, s *Store, id string, cursor int64) (data []byte, res protocol.PollResult) {
	t.Helper()
	for first := true; ; first = false {
		r, err := s.Poll(id, cursor, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if first {
			res = r
		}
		for _, c := range r.Chunks {
			data = append(data, c.Data...)
		}
		cursor = r.Next
		if !r.More {
			return data, res
		}
	}
}

// A writer's output comes back byte-exact, with streams and seqs, from
// the queue while it is written and from the files after; a supervisor
// that resumes the job after a crash finds the torn last frame cut off,
// and skip frames are reported as crash gaps.
func TestWriteReadResume(t *testing.T) {
	s := testStore(t, 64<<10, 1<<20)
	w, err := s.Open("job-1", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	off := int64(0)
	for i := range 40 {
		d := bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i)
		st := protocol.Stdout
		if i%3 == 0 {
			st = protocol.Stderr
		}
		w.Append(protocol.Chunk{Stream: st, Seq: uint64(i + 2), Offset: off, Data: d}, int64(1000+i), 0)
		want = append(want, d...)
		off += int64(len(d))
	}
	r, err := w.Read(0, off, 1<<20)
	if err != nil || r.Lost != 0 || len(r.Chunks) != 40 || r.Chunks[3].Stream != protocol.Stderr || r.Chunks[4].Seq != 6 {
		t.Fatalf("read while writing: %v, %+v", err, r.Lost)
	}
	written(t, w)
	w.Finish(protocol.JobInfo{JobID: "job-1", State: protocol.StateExited, OutputEnd: off}, nil)
	written(t, w)
	w.Release()
	got, res := readAll(t, s, "job-1", 0)
	if !bytes.Equal(got, want) || res.Truncated || res.Job.OutputEnd != off {
		t.Fatalf("read back %d bytes of %d, truncated %v, end %d", len(got), len(want), res.Truncated, res.Job.OutputEnd)
	}

	// A torn frame at the end (a write cut by a crash), then a resume.
	segs, _ := listSegs(filepath.Join(s.Dir(), "job-1"))
	last := filepath.Join(s.Dir(), "job-1", segName(segs[len(segs)-1].start))
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{magic, kindStdout, 0, 0, 1})
	f.Close()
	w, err = s.Open("job-1", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: 50, Offset: off - 10, Data: []byte("0123456789tail")}, 0, 0) // (overlaps: only "tail" is new)
	w.Skip(off + 4 + 100)
	w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: 51, Offset: off + 4 + 100, Data: []byte("after")}, 0, 0)
	written(t, w)
	w.Release()
	got, _ = readAll(t, s, "job-1", 0)
	if want := string(want) + "tail"; string(got[:len(want)]) != want {
		t.Fatalf("after resume: %d bytes", len(got))
	}
	r2, err := s.Poll("job-1", off+4, 1000)
	if err != nil || !r2.CrashGap || !r2.Truncated || r2.LostBytes != 0 || len(r2.Chunks) != 1 || string(r2.Chunks[0].Data) != "after" {
		t.Fatalf("poll across the skip: %+v, %v", r2, err)
	}
	if _, err := s.Poll("job-1", off+1000, 10); !errors.Is(err, ErrCursor) {
		t.Fatalf("cursor past the end: %v", err)
	}
}

// Rotation keeps the segments under MaxBytes; the start is reported lost.
func TestRotation(t *testing.T) {
	s := testStore(t, 64<<10, 128<<10)
	w, _ := s.Open("r", true, nil)
	off := int64(0)
	for i := range 100 {
		d := bytes.Repeat([]byte{byte(i)}, 10000)
		w.Append(protocol.Chunk{Stream: protocol.Stdout, Seq: uint64(i + 1), Offset: off, Data: d}, 0, 0)
		off += int64(len(d))
	}
	written(t, w)
	var total int64
	segs, _ := listSegs(filepath.Join(s.Dir(), "r"))
	for _, sg := range segs {
		total += sg.size
	}
	if total > 128<<10 || len(segs) < 2 {
		t.Fatalf("%d bytes in %d segments", total, len(segs))
	}
	r, err := w.Read(0, off, 1<<20)
	if err != nil || r.Lost == 0 || r.Chunks[0].Offset != r.Lost || r.Next != off {
		t.Fatalf("read from 0: lost %d, next %d, %v", r.Lost, r.Next, err)
	}
}

// Ids that are not safe path components are refused; the root must be
// ours alone.
func TestHostile(t *testing.T) {
	s := testStore(t, 64<<10, 128<<10)
	for _, id := range []string{"", ".", "..", "../x", "a/b", "/x", ".x", "a\x00"} {
		if _, err := s.Open(id, true, nil); err == nil {
			t.Errorf("Open(%q) accepted", id)
		}
		if _, err := s.Poll(id, 0, 10); !errors.Is(err, ErrNoOutput) {
			t.Errorf("Poll(%q): %v", id, err)
		}
	}
	open := t.TempDir()
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: open}); err == nil {
		t.Error("a root open to others accepted")
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Dir: link}); err == nil {
		t.Error("a symlinked root accepted")
	}
}
