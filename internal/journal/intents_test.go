package journal

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

var errSkip = errors.New("skip")

func intentRec(id string, pid int) func() *Record {
	return func() *Record { return &Record{JobID: id, Pid: pid, Pgid: pid, State: "running", StartTicks: 7} }
}

func mustAppend(t *testing.T, in *Intents, id string, pid int) {
	t.Helper()
	if err := in.Append(intentRec(id, pid)); err != nil {
		t.Fatal(err)
	}
}

func last(in *Intents) uint64 {
	var l uint64
	in.Hold(func(s uint64) { l = s })
	return l
}

// reread returns what a new run would read of the file at path.
func reread(t *testing.T, path string) IntentsReport {
	t.Helper()
	in, rep, err := OpenIntents(path)
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	return rep
}

func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestIntentsLifecycle: lines are appended one per start, read back by
// the next run (which goes on numbering them), truncated once a journal
// write covers them all, and rewritten without the covered ones when the
// file grows past its bound while new ones keep coming.
func TestIntentsLifecycle(t *testing.T) {
	path := IntentsPath(filepath.Join(t.TempDir(), "journal.json"))
	in, rep, err := OpenIntents(path)
	if err != nil || len(rep.Intents) > 0 || rep.MovedTo != "" {
		t.Fatalf("new file: %v %+v", err, rep)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file: %v %v", fi, err)
	}
	gen := in.Generation()
	mustAppend(t, in, "j-1", 101)
	mustAppend(t, in, "j-2", 102)
	if l := last(in); l != 2 {
		t.Fatalf("last %d, want 2", l)
	}
	if n := len(lines(t, path)); n != 3 {
		t.Fatalf("%d lines, want header + 2", n)
	}
	// A crash: the next run reads both, keeps the generation, numbers on.
	in2, rep, err := OpenIntents(path)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Generation != gen || in2.Generation() != gen || len(rep.Intents) != 2 || rep.Intents[1].Record.JobID != "j-2" || rep.Intents[1].Seq != 2 {
		t.Fatalf("read back: %+v", rep)
	}
	mustAppend(t, in2, "j-3", 103)
	if l := last(in2); l != 3 {
		t.Fatalf("numbering after takeover: last %d, want 3", l)
	}
	// A journal write covering the first two: j-3 stays, and the file
	// says the others are covered (even to a run whose journal is lost).
	if err := in2.Covered(2); err != nil {
		t.Fatal(err)
	}
	rep = reread(t, path)
	if len(rep.Intents) != 3 || rep.Covered != 2 {
		// (not rewritten: small; covered lines are told apart by seq)
		t.Fatalf("after covering 2 of 3: %d lines, covered %d", len(rep.Intents), rep.Covered)
	}
	for _, doc := range []*File{{IntentsGeneration: gen, IntentsCovered: 2}, {IntentsGeneration: gen, IntentsCovered: 1}, {}, nil} {
		if u := Uncovered(doc, rep); len(u) != 1 || u[0].Record.JobID != "j-3" {
			t.Fatalf("uncovered with journal %+v: %+v", doc, u)
		}
	}
	// All covered: cut back to the header and the covered mark.
	if err := in2.Covered(3); err != nil {
		t.Fatal(err)
	}
	if l := lines(t, path); len(l) != 2 || !strings.Contains(l[0], gen) || l[1] != `{"covered":3}` {
		t.Fatalf("after covering all: %q", l)
	}
	mustAppend(t, in2, "j-4", 104)
	rep = reread(t, path)
	if len(rep.Intents) != 1 || rep.Intents[0].Seq != 4 || rep.Torn || len(rep.Dropped) > 0 {
		t.Fatalf("append after truncation: %+v", rep)
	}
	// Growth past the bound with lines still uncovered: rewritten with
	// those only.
	big := strings.Repeat("x", 64<<10)
	for i := 0; i < 20; i++ {
		if err := in2.Append(func() *Record { return &Record{JobID: "j-big", State: "running", Shell: big} }); err != nil {
			t.Fatal(err)
		}
	}
	mustAppend(t, in2, "j-last", 105)
	if err := in2.Covered(last(in2) - 1); err != nil {
		t.Fatal(err)
	}
	if l := lines(t, path); len(l) != 3 || !strings.HasPrefix(l[1], `{"covered":`) || !strings.Contains(l[2], "j-last") {
		t.Fatalf("after compaction: %d lines", len(l))
	}
	mustAppend(t, in2, "j-after", 106)
	rep = reread(t, path)
	if len(rep.Intents) != 2 || rep.Intents[1].Record.JobID != "j-after" || rep.Covered != last(in2)-2 {
		t.Fatalf("append after compaction: %+v", rep)
	}
	// A new generation (the journal was lost): the lines not covered
	// stay, numbering goes on.
	if err := in2.Regenerate(); err != nil {
		t.Fatal(err)
	}
	rep = reread(t, path)
	if rep.Generation == gen || len(rep.Intents) != 2 || last(in2) != 106-100+20 {
		t.Fatalf("after Regenerate: generation %s, %d lines, last %d", rep.Generation, len(rep.Intents), last(in2))
	}
	in.Close()
	in2.Close()
}

// twoIntents returns a new intents file (its directory, path, Intents)
// with two lines, j-1 and j-2.
func twoIntents(t *testing.T) (dir, path string, in *Intents) {
	t.Helper()
	dir = t.TempDir()
	path = IntentsPath(filepath.Join(dir, "journal.json"))
	in, _, err := OpenIntents(path)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, in, "j-1", 101)
	mustAppend(t, in, "j-2", 102)
	return dir, path, in
}

// TestIntentsDamaged: a line cut short by a crash is left out (and the
// next line starts on a line of its own); an invalid line is left out,
// the others kept; an unusable file is moved aside and a new generation
// begun (a journal naming the old one covers none of its lines).
func TestIntentsDamaged(t *testing.T) {
	dir, path, in := twoIntents(t)
	gen := in.Generation()
	in.Close()
	b, _ := os.ReadFile(path)
	// torn: the last line without its end
	if err := os.WriteFile(path, b[:len(b)-5], 0o600); err != nil {
		t.Fatal(err)
	}
	in, rep, err := OpenIntents(path)
	if err != nil || !rep.Torn || len(rep.Intents) != 1 || rep.Intents[0].Record.JobID != "j-1" {
		t.Fatalf("torn: %v %+v", err, rep)
	}
	mustAppend(t, in, "j-3", 103)
	in.Close()
	_, rep, _ = OpenIntents(path)
	if rep.Torn || len(rep.Dropped) > 0 || len(rep.Intents) != 2 || rep.Intents[1].Record.JobID != "j-3" {
		t.Fatalf("after a torn line: %+v", rep)
	}
	// invalid lines among valid ones
	hdr, _, _ := bytes.Cut(b, []byte{'\n'})
	bad := string(hdr) + "\n" +
		`{"seq":1,"record":{"jobId":"j-1","pid":5,"pgid":5,"state":"running"}}` + "\n" +
		`not json` + "\n" +
		`{"seq":2,"record":{"jobId":"j-2","pid":-5,"pgid":5,"state":"running"}}` + "\n" +
		`{"seq":3,"record":{"jobId":"j-3","pid":5,"pgid":5,"state":"flying"}}` + "\n" +
		`{"seq":1,"record":{"jobId":"j-4","pid":5,"pgid":5,"state":"running"}}` + "\n" +
		`{"seq":5,"record":{"jobId":"j-5","pid":5,"pgid":5,"state":"running"},"extra":1}` + "\n" +
		`{"seq":6,"record":{"jobId":"j-6","pid":6,"pgid":6,"state":"running"}}` + "\n"
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	in, rep, err = OpenIntents(path)
	if err != nil || len(rep.Dropped) != 5 || len(rep.Intents) != 2 || rep.Intents[1].Record.JobID != "j-6" {
		t.Fatalf("invalid lines: %v dropped %q kept %+v", err, rep.Dropped, rep.Intents)
	}
	if l := last(in); l != 6 {
		t.Fatalf("numbering goes on from the highest seq: %d", l)
	}
	in.Close()
	// unusable files: moved aside, a new generation begun
	for name, make := range map[string]func() error{
		"garbage":   func() error { return os.WriteFile(path, []byte("garbage\n"), 0o600) },
		"no header": func() error { return os.WriteFile(path, []byte(`{"intents":9,"generation":"x"}`+"\n"), 0o600) },
		"symlink":   func() error { return os.Symlink(filepath.Join(dir, "elsewhere"), path) },
		"fifo":      func() error { return syscall.Mkfifo(path, 0o600) },
		"directory": func() error { return os.Mkdir(path, 0o700) },
		"foreign": func() error {
			if err := os.WriteFile(path, []byte(string(hdr)+"\n"), 0o600); err != nil {
				return err
			}
			if err := os.Chown(path, 54321, 54321); err != nil {
				return errSkip // (not root: no file of another user to be had)
			}
			return nil
		},
		"too large": func() error {
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(MaxIntentsBytes + 1)
		},
	} {
		os.RemoveAll(path)
		if err := make(); err == errSkip {
			t.Logf("%s: skipped (chown needs root)", name)
			continue
		} else if err != nil {
			t.Fatal(name, err)
		}
		in, rep, err := OpenIntents(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rep.MovedTo == "" || rep.Why == nil || len(rep.Intents) > 0 || in.Generation() == gen {
			t.Errorf("%s: %+v (generation %s)", name, rep, in.Generation())
		}
		if _, err := os.Lstat(rep.MovedTo); err != nil {
			t.Errorf("%s: not moved aside: %v", name, err)
		}
		if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: no new file: %v", name, err)
		}
		in.Close()
		os.RemoveAll(rep.MovedTo)
	}
	if _, err := os.Stat(filepath.Join(dir, "elsewhere")); !os.IsNotExist(err) {
		t.Errorf("the symlink was followed: %v", err)
	}
}

// TestUncovered: lines past the file's covered mark, and past the
// journal's covered seq when it names the file's generation, are newer
// than the journal; without either, all are.
func TestUncovered(t *testing.T) {
	ins := []Intent{{Seq: 3}, {Seq: 4}, {Seq: 9}}
	for _, c := range []struct {
		doc     *File
		covered uint64
		want    int
	}{
		{&File{IntentsGeneration: "g", IntentsCovered: 4}, 0, 1},
		{&File{IntentsGeneration: "g", IntentsCovered: 9}, 0, 0},
		{&File{IntentsGeneration: "g", IntentsCovered: 0}, 0, 3},
		{&File{IntentsGeneration: "other", IntentsCovered: 100}, 0, 3},
		{&File{IntentsGeneration: "other", IntentsCovered: 100}, 3, 2},
		{&File{IntentsGeneration: "g", IntentsCovered: 3}, 4, 1},
		{&File{}, 0, 3},
		{nil, 0, 3},
		{nil, 9, 0},
	} {
		if got := Uncovered(c.doc, IntentsReport{Generation: "g", Intents: ins, Covered: c.covered}); len(got) != c.want {
			t.Errorf("%+v, file covered %d: %d uncovered, want %d", c.doc, c.covered, len(got), c.want)
		}
	}
}

// TestAppendFailure: a line that cannot be written is an error and
// counted; nothing is numbered for it.
func TestAppendFailure(t *testing.T) {
	in, _, err := OpenIntents(IntentsPath(filepath.Join(t.TempDir(), "journal.json")))
	if err != nil {
		t.Fatal(err)
	}
	in.f.Close() // (the descriptor gone under it)
	if err := in.Append(intentRec("j-1", 5)); err == nil {
		t.Fatal("append to a closed file succeeded")
	}
	if in.Failures.Load() != 1 || last(in) != 0 {
		t.Errorf("failures %d, last %d", in.Failures.Load(), last(in))
	}
	if err := in.Append(func() *Record { return nil }); err != nil || last(in) != 0 {
		t.Errorf("a nil record: %v, last %d", err, last(in))
	}
}

// TestJournalNamesIntents: the journal header carries the intents
// generation and covered seq through a write and a load.
func TestJournalNamesIntents(t *testing.T) {
	j := New(filepath.Join(t.TempDir(), "journal.json"))
	if err := j.SaveEncoded(&File{InstanceID: "i", IntentsGeneration: "g\"1", IntentsCovered: 42}, nil); err != nil {
		t.Fatal(err)
	}
	doc, err := j.Load()
	if err != nil || doc.IntentsGeneration != "g\"1" || doc.IntentsCovered != 42 {
		t.Fatalf("%+v %v", doc, err)
	}
	if err := j.SaveEncoded(&File{InstanceID: "i"}, nil); err != nil {
		t.Fatal(err)
	}
	if doc, err := j.Load(); err != nil || doc.IntentsGeneration != "" || doc.IntentsCovered != 0 {
		t.Fatalf("without intents: %+v %v", doc, err)
	}
}

// FuzzParseIntents: any file content parses without panicking; what is
// kept is in increasing seq order and valid, and a rewrite of what is
// kept reads back the same.
func FuzzParseIntents(f *testing.F) {
	f.Add([]byte(`{"intents":1,"generation":"ab"}` + "\n" + `{"seq":1,"record":{"jobId":"j-1","pid":5,"pgid":5,"state":"running"}}` + "\n"))
	f.Add([]byte(`{"intents":1,"generation":"ab"}` + "\n" + `{"seq":2,"record":{"jobId":"j-1","pid":5,"pgid":5,"state":"running"}}` + "\n" + `{"seq":1,"rec`))
	f.Add([]byte("\n\n\n"))
	f.Add([]byte(`{"intents":1,"generation":""}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var rep IntentsReport
		_, lines, err := parseIntents(b, &rep)
		if err != nil {
			return
		}
		var last uint64
		for i, l := range lines {
			if l.seq <= last || rep.Intents[i].Seq != l.seq || checkRecord(&rep.Intents[i].Record) != "" {
				t.Fatalf("line %d kept: seq %d after %d", i, l.seq, last)
			}
			last = l.seq
		}
	})
}

// TestIntentsNumberingAfterTruncation: once a journal write covered every
// line the file is truncated, and the next run, reading no line, numbers
// on from what the journal covers (NumberFrom): numbering from 1 again
// made its lines look covered by that journal, and a crash before its own
// first journal write lost them.
func TestIntentsNumberingAfterTruncation(t *testing.T) {
	path := IntentsPath(filepath.Join(t.TempDir(), "journal.json"))
	in, _, err := OpenIntents(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		mustAppend(t, in, "j-old", 100+i)
	}
	doc := &File{IntentsGeneration: in.Generation(), IntentsCovered: last(in)}
	if err := in.Covered(doc.IntentsCovered); err != nil {
		t.Fatal(err)
	}
	in.Close()
	// (the file's covered mark says how far numbering went; a crash
	// between the cut and the mark leaves that to the journal)
	if err := os.WriteFile(path, []byte(lines(t, path)[0]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in2, rep, err := OpenIntents(path)
	if err != nil || len(rep.Intents) != 0 {
		t.Fatalf("%v %+v", err, rep)
	}
	in2.NumberFrom(doc.IntentsCovered)
	mustAppend(t, in2, "j-new", 200)
	in2.Close()
	if u := Uncovered(doc, reread(t, path)); len(u) != 1 || u[0].Record.JobID != "j-new" {
		t.Fatalf("the new run's line after truncation: %+v", u)
	}
}

// chattr sets or clears the immutable attribute (which binds root too),
// or skips the test.
func chattr(t *testing.T, flag, path string) {
	t.Helper()
	if out, err := exec.Command("chattr", flag, path).CombinedOutput(); err != nil {
		t.Skipf("chattr %s %s: %v %s (needs root and a filesystem with attributes)", flag, path, err, out)
	}
}

// TestIntentsUnwritable: a file that can be read but not written is
// still taken over (its generation and lines known: journals written
// then cover them, so no later run replays them), appends fail and are
// counted; a rewrite that fails before its rename leaves the old file
// and appending to it as they were; Covered after Close reopens nothing.
func TestIntentsUnwritable(t *testing.T) {
	dir, path, in := twoIntents(t)
	gen := in.Generation()
	// A rewrite that cannot even make its temp file: appends go on.
	chattr(t, "+i", dir)
	err := func() error {
		defer chattr(t, "-i", dir)
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.rewriteLocked()
	}()
	if err == nil {
		t.Fatal("a rewrite in an immutable directory succeeded")
	}
	mustAppend(t, in, "j-3", 103)
	in.Close()
	if err := in.Covered(3); err != nil || in.f != nil {
		t.Fatalf("Covered after Close: %v, file %v", err, in.f)
	}
	// An immutable file: read, not writable.
	chattr(t, "+i", path)
	defer chattr(t, "-i", path)
	in2, rep, err := OpenIntents(path)
	if err == nil || in2 == nil {
		t.Fatalf("an immutable file: %v, %v", err, in2)
	}
	if in2.Generation() != gen || len(rep.Intents) != 3 || last(in2) != 3 || rep.MovedTo != "" {
		t.Fatalf("taken over: generation %s (want %s), %d lines, last %d", in2.Generation(), gen, len(rep.Intents), last(in2))
	}
	if err := in2.Append(intentRec("j-4", 104)); err == nil || in2.Failures.Load() != 1 {
		t.Fatalf("append to an immutable file: %v (failures %d)", err, in2.Failures.Load())
	}
	if err := in2.Covered(3); err == nil {
		t.Fatal("Covered could rewrite an immutable file")
	}
	chattr(t, "-i", path)
	// Writable again: the next Covered rewrites it and appends work.
	mustAppendErr := in2.Append(intentRec("j-5", 105))
	if mustAppendErr == nil {
		t.Fatal("appended before any rewrite reopened the file")
	}
	if err := in2.Covered(3); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, in2, "j-6", 106)
	in2.Close()
}

// TestIntentsFull: an append that would take the file past what the
// next run reads is refused and counted (the journal has not been written
// for that long), not written.
func TestIntentsFull(t *testing.T) {
	in, _, err := OpenIntents(IntentsPath(filepath.Join(t.TempDir(), "journal.json")))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	in.size = MaxIntentsBytes - 10
	if err := in.Append(intentRec("j-1", 5)); err == nil || !strings.Contains(err.Error(), "full") || in.Failures.Load() != 1 || last(in) != 0 {
		t.Fatalf("%v, failures %d, last %d", err, in.Failures.Load(), last(in))
	}
}

// TestIntentsCutShort: a line whose write failed part way is not
// continued by the next one: the file is rewritten without it, or, when
// that fails too, nothing more is appended until a rewrite works.
func TestIntentsCutShort(t *testing.T) {
	dir, path, in := twoIntents(t)
	defer in.Close()
	cut := func() error {
		in.mu.Lock()
		defer in.mu.Unlock()
		n, _ := in.f.Write([]byte(`{"seq":3,"rec`)) // (a write that stopped there)
		in.size += int64(n)
		return in.cutShortLocked(errors.New("disk gone"), n)
	}
	if err := cut(); err == nil {
		t.Fatal("no error for the cut line")
	}
	mustAppend(t, in, "j-3", 103)
	if rep := reread(t, path); rep.Torn || len(rep.Dropped) > 0 || len(rep.Intents) != 3 {
		t.Fatalf("after a cut line: %+v", rep)
	}
	chattr(t, "+i", dir)
	err := cut()
	chattr(t, "-i", dir)
	if err == nil || in.Writable() {
		t.Fatalf("a cut line that cannot be rewritten away: %v, writable %v", err, in.Writable())
	}
	if err := in.Append(intentRec("j-4", 104)); err == nil {
		t.Fatal("appended after a cut line")
	}
	if err := in.Covered(last(in)); err != nil || !in.Writable() {
		t.Fatalf("Covered did not rewrite it: %v", err)
	}
	mustAppend(t, in, "j-5", 105)
	if rep := reread(t, path); rep.Torn || len(rep.Dropped) > 0 || rep.Intents[len(rep.Intents)-1].Record.JobID != "j-5" {
		t.Fatalf("after the rewrite: %+v", rep)
	}
}

// TestIntentsMarkRetried: a covered mark that could not be written is
// written by the next Covered, even for the same seq (it was skipped as
// done, and a journal lost later let covered lines be replayed).
func TestIntentsMarkRetried(t *testing.T) {
	_, path, in := twoIntents(t)
	defer in.Close()
	chattr(t, "+i", path)
	err := in.Covered(1)
	chattr(t, "-i", path)
	if err == nil {
		t.Fatal("a mark written to an immutable file")
	}
	if rep := reread(t, path); rep.Covered != 0 {
		t.Fatalf("covered %d before the retry", rep.Covered)
	}
	if err := in.Covered(1); err != nil {
		t.Fatal(err)
	}
	if rep := reread(t, path); rep.Covered != 1 || len(Uncovered(nil, rep)) != 1 {
		t.Fatalf("after the retry: covered %d, %d uncovered", rep.Covered, len(Uncovered(nil, rep)))
	}
}
