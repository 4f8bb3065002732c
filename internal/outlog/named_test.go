package outlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// A job's record as spawned (Begin) is written with its files, before
// its output: a job whose supervisor died before it ended is found by
// its name, with its command, and said to have an unknown end; the
// record of its end replaces it. Named orders such a job by its
// creation. Begin alone does no I/O.
func TestBeginRecordsName(t *testing.T) {
	s := testStore(t, 64<<10, 1<<20)
	begin := func(id string, created int64) *Writer {
		t.Helper()
		w, err := s.Open(id, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Begin(protocol.JobInfo{JobID: id, Name: "web", State: protocol.StateStarting, Argv: []string{"serve", id}, CreatedAt: created})
		return w
	}
	w := begin("j-crashed", 100)
	if s.Has("j-crashed") {
		t.Fatal("Begin made the job's directory: it must do no I/O")
	}
	w.Append(protocol.Chunk{Seq: 2, Offset: 0, Data: []byte("hello\n")}, 1, 0)
	written(t, w)
	w.Release() // (its supervisor gone: never finished)

	id, ok := s.Named("web")
	if !ok || id != "j-crashed" {
		t.Fatalf("Named(web) = %q, %v; want the job recorded at its spawn", id, ok)
	}
	data, res := readAll(t, s, "j-crashed", 0)
	if string(data) != "hello\n" || res.Job.Name != "web" || res.Job.State != protocol.StateExited ||
		len(res.Job.Argv) != 2 || res.Job.CreatedAt != 100 || !strings.Contains(res.Job.Error, "without a record of how the job ended") ||
		res.Job.Reason != protocol.ReasonSupervisorRestart {
		t.Fatalf("poll: %q, job %+v", data, res.Job)
	}

	// A job of that name that ended before the crashed one was created:
	// the crashed one still comes first; one that ended after it, not.
	finish := func(id string, created, ended int64) {
		t.Helper()
		w := begin(id, created)
		w.Append(protocol.Chunk{Seq: 2, Offset: 0, Data: []byte(id)}, 1, 0)
		w.Finish(protocol.JobInfo{JobID: id, Name: "web", State: protocol.StateExited, CreatedAt: created, EndedAt: ended, Reason: protocol.ReasonExit}, nil)
		w.Begin(protocol.JobInfo{JobID: id, Name: "late", State: protocol.StateStarting}) // (ignored after Finish)
		written(t, w)
		w.Release()
	}
	finish("j-early", 10, 50)
	if id, _ := s.Named("web"); id != "j-crashed" {
		t.Fatalf("Named(web) = %q; want j-crashed (created after j-early ended)", id)
	}
	finish("j-late", 150, 200)
	if id, _ := s.Named("web"); id != "j-late" {
		t.Fatalf("Named(web) = %q; want j-late", id)
	}
	if _, res := readAll(t, s, "j-late", 0); res.Job.State != protocol.StateExited || res.Job.Reason != protocol.ReasonExit || res.Job.Error != "" {
		t.Fatalf("the ended job's record: %+v", res.Job)
	}
	if _, ok := s.Named("late"); ok {
		t.Fatal("a Begin after Finish was recorded")
	}
}

// Records on disk are input: a name that is not a valid name, a record
// of another id, an oversized or unparsable one, or one behind a symlink
// is not looked up by name (the output is still polled by id).
func TestNamedHostileRecords(t *testing.T) {
	s := testStore(t, 64<<10, 1<<20)
	write := func(id, content string) {
		t.Helper()
		w, err := s.Open(id, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Append(protocol.Chunk{Seq: 2, Offset: 0, Data: []byte("x")}, 1, 0)
		written(t, w)
		w.Release()
		if err := os.WriteFile(filepath.Join(s.Dir(), id, infoFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("j-a", `{"jobId":"j-a","name":"../evil","state":"exited"}`)
	write("j-b", `{"jobId":"j-b","name":"j-evil","state":"exited"}`)
	write("j-c", `{"jobId":"j-other","name":"evil","state":"exited"}`)
	write("j-d", `{"jobId":"j-d","name":"evil","state":"exited","argv":["`+strings.Repeat("a", 2<<20)+`"]}`)
	write("j-e", `{"jobId":"j-e","name":`)
	write("j-f", "")
	target := filepath.Join(t.TempDir(), "info.json")
	if err := os.WriteFile(target, []byte(`{"jobId":"j-f","name":"evil","state":"exited"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(s.Dir(), "j-f", infoFile))
	if err := os.Symlink(target, filepath.Join(s.Dir(), "j-f", infoFile)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"evil", "../evil", "j-evil", ""} {
		if id, ok := s.Named(name); ok {
			t.Errorf("Named(%q) = %s", name, id)
		}
	}
	for _, id := range []string{"j-a", "j-b", "j-c", "j-d", "j-e", "j-f"} {
		data, res := readAll(t, s, id, 0)
		if string(data) != "x" || res.Job.JobID != id || res.Job.Name != "" {
			t.Errorf("poll %s: %q, job %+v", id, data, res.Job)
		}
	}
}
