package server

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// randomFile writes n pseudo-random bytes (seeded: reproducible) to a
// file of dir and returns its path and content.
func randomFile(t *testing.T, dir, name string, n int, seed uint64) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed+1))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, data
}

// pollAll reads a job's whole output from cursor 0 by poll, by stream,
// and returns it with the bytes reported lost and the chunks' offsets
// checked contiguous from the first one.
func pollAll(t *testing.T, c *client.Client, id string) (out, errb []byte, lost int64, first int64) {
	t.Helper()
	var ob, eb bytes.Buffer
	cursor, first := int64(0), int64(-1)
	for {
		res, err := c.Poll(ctxT(t, 30*time.Second), id, cursor, 0)
		if err != nil {
			t.Fatalf("poll %s from %d: %v", id, cursor, err)
		}
		lost += res.LostBytes
		for _, ch := range res.Chunks {
			if first < 0 {
				first = ch.Offset
			} else if ch.Offset != cursor {
				t.Fatalf("chunk at %d, expected %d (lost %d)", ch.Offset, cursor, res.LostBytes)
			}
			if ch.Stream == protocol.Stderr {
				eb.Write(ch.Data)
			} else {
				ob.Write(ch.Data)
			}
			cursor = ch.Offset + int64(len(ch.Data))
		}
		if res.Next < cursor {
			t.Fatalf("next %d below the end of the chunks %d", res.Next, cursor)
		}
		cursor = res.Next
		if !res.More && res.Job.State == protocol.StateExited {
			return ob.Bytes(), eb.Bytes(), lost, first
		}
	}
}

// diskConfig is a test config whose ring holds little, so that output
// is read back from disk.
func diskConfig(t *testing.T) Config {
	cfg := testConfig(t)
	cfg.Jobs.RingBytes = 64 << 10
	cfg.Jobs.MergeMaxBytes = 32 << 10
	cfg.OutputSegmentBytes = 1 << 20
	cfg.OutputMaxBytes = 128 << 20
	cfg.Jobs.MaxFinished = 1 // (a second finished job forgets the first)
	return cfg
}

// forgetBySpawning finishes a small job, which pushes the oldest finished
// job out of memory (MaxFinished 1).
func forgetBySpawning(t *testing.T, c *client.Client, gone string) {
	t.Helper()
	if _, fin, err := c.SpawnWait(ctxT(t, 20*time.Second), protocol.SpawnArgs{Argv: []string{"true"}}, 15*time.Second); err != nil || !fin {
		t.Fatalf("spawn a job to push the first out: finished %v, %v", fin, err)
	}
	if _, err := c.Status(ctxT(t, 10*time.Second), gone); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("job %s still in memory: %v", gone, err)
	}
}

// The bar: a job printing a lot with output on disk, read back
// byte-exact through poll after it left the ring, after it left memory,
// and after a supervisor restart; remove deletes its files.
func TestOutputOnDiskWholeOutput(t *testing.T) {
	size := 50 << 20
	if testing.Short() {
		size = 4 << 20
	}
	cfg := diskConfig(t)
	ts := startServer(t, cfg)
	dir := t.TempDir()
	outPath, wantOut := randomFile(t, dir, "out", size, 1)
	errPath, wantErr := randomFile(t, dir, "err", size/16, 2)
	info, fin, err := ts.client.SpawnWait(ctxT(t, 120*time.Second), protocol.SpawnArgs{
		Argv: []string{"sh", "-c", `cat "$1"; cat "$2" >&2`, "sh", outPath, errPath}, Output: protocol.OutputDisk,
	}, 100*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: finished %v, %v", fin, err)
	}
	id := info.JobID
	if !info.OutputDisk || info.OutputDiskError != "" {
		t.Fatalf("job not on disk: %+v", info)
	}
	check := func(when string) {
		t.Helper()
		out, errb, lost, first := pollAll(t, ts.client, id)
		if lost != 0 || first != 0 {
			t.Fatalf("%s: lost %d bytes, first chunk at %d", when, lost, first)
		}
		if !bytes.Equal(out, wantOut) || !bytes.Equal(errb, wantErr) {
			t.Fatalf("%s: output differs: stdout %d bytes (want %d), stderr %d (want %d)", when, len(out), len(wantOut), len(errb), len(wantErr))
		}
	}
	check("in memory, evicted from the ring")
	forgetBySpawning(t, ts.client, id)
	check("forgotten")

	// A restart: a new supervisor on the same state directory.
	ts = ts.restart(t)
	check("after a restart")

	if err := ts.client.Remove(ctxT(t, 10*time.Second), id); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(cfg.OutputPath(), id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("files of the removed job left: %v", err)
	}
	if _, err := ts.client.Poll(ctxT(t, 10*time.Second), id, 0, 0); !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("poll of the removed job: %v, want not-found", err)
	}
}

// dirBytes sums the sizes of the files in dir.
func dirBytes(t *testing.T, dir string) (n int64, segs int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		i, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".seg") {
			n += i.Size()
			segs++
			if i.Mode().Perm() != 0o600 {
				t.Errorf("segment %s has mode %o, want 0600", e.Name(), i.Mode().Perm())
			}
		}
	}
	return n, segs
}

// Rotation keeps a job's files under --output-max-bytes; poll from 0
// then reports the rotated-away start as lost and returns the rest
// byte-exact. Removing a job in memory deletes its files.
func TestOutputOnDiskRotationCap(t *testing.T) {
	cfg := diskConfig(t)
	cfg.OutputSegmentBytes = 64 << 10
	cfg.OutputMaxBytes = 256 << 10
	ts := startServer(t, cfg)
	path, want := randomFile(t, t.TempDir(), "out", 2<<20, 3)
	info, fin, err := ts.client.SpawnWait(ctxT(t, 60*time.Second), protocol.SpawnArgs{
		Argv: []string{"cat", path}, Output: protocol.OutputDisk,
	}, 50*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: finished %v, %v", fin, err)
	}
	jdir := filepath.Join(cfg.OutputPath(), info.JobID)
	// (its end is recorded once all its output is written: no rotation
	// after that, while the test reads)
	eventually(t, 20*time.Second, "the job's output all written", func() bool {
		b, err := os.ReadFile(filepath.Join(jdir, "info.json"))
		return err == nil && strings.Contains(string(b), `"state":"exited"`)
	})
	fi, err := os.Lstat(jdir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("job directory: %v, mode %v", err, fi.Mode())
	}
	if fi, err := os.Lstat(cfg.OutputPath()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("output directory: %v, mode %v", err, fi.Mode())
	}
	n, segs := dirBytes(t, jdir)
	if n > cfg.OutputMaxBytes || segs < 2 {
		t.Fatalf("%d bytes in %d segments, cap %d", n, segs, cfg.OutputMaxBytes)
	}
	out, _, lost, first := pollAll(t, ts.client, info.JobID)
	if lost == 0 || lost != first || !bytes.Equal(out, want[first:]) {
		t.Fatalf("lost %d, first at %d, %d bytes read (of %d)", lost, first, len(out), len(want))
	}
	if err := ts.client.Remove(ctxT(t, 10*time.Second), info.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(jdir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("files of the removed job left: %v", err)
	}
}

// Services keep their output on disk by default, one-shot jobs not;
// --output-disk changes the default; spawn's output wins.
func TestOutputOnDiskDefaults(t *testing.T) {
	for _, tc := range []struct {
		policy, output string
		service, want  bool
	}{
		{"", "", true, true}, {"", "", false, false}, {"", "memory", true, false},
		{"all", "", false, true}, {"none", "", true, false}, {"none", "disk", false, true},
	} {
		cfg := testConfig(t)
		cfg.Jobs.OutputDisk = tc.policy
		ts := startServer(t, cfg)
		args := protocol.SpawnArgs{Argv: []string{"sleep", "60"}, Output: tc.output}
		if tc.service {
			args.Restart = &protocol.RestartPolicy{Policy: protocol.RestartAlways}
		}
		info, err := ts.client.Spawn(ctxT(t, 10*time.Second), args)
		if err != nil {
			t.Fatal(err)
		}
		if info.OutputDisk != tc.want {
			t.Errorf("%+v: outputDisk %v", tc, info.OutputDisk)
		}
		if _, err := ts.client.Kill(ctxT(t, 10*time.Second), info.JobID, ""); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t)
	ts := startServer(t, cfg)
	_, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{Argv: []string{"true"}, Output: "tape"})
	if !isCode(err, protocol.CodeInvalidArgument) {
		t.Fatalf("output tape: %v, want invalid-argument", err)
	}
}

// The age sweep removes the files of jobs no longer in memory once they
// are older than --output-max-age (and never those of jobs in memory).
func TestOutputOnDiskAgeSweep(t *testing.T) {
	cfg := diskConfig(t)
	cfg.OutputMaxAge = 300 * time.Millisecond
	cfg.OutputSweepInterval = 20 * time.Millisecond
	ts := startServer(t, cfg)
	info, fin, err := ts.client.SpawnWait(ctxT(t, 20*time.Second), protocol.SpawnArgs{
		Argv: []string{"echo", "hello"}, Output: protocol.OutputDisk}, 15*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: %v %v", fin, err)
	}
	jdir := filepath.Join(cfg.OutputPath(), info.JobID)
	// A running job with output on disk, quiet past the age: kept.
	live, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{Shell: "echo hi; exec sleep 60", Output: protocol.OutputDisk})
	if err != nil {
		t.Fatal(err)
	}
	forgetBySpawning(t, ts.client, info.JobID)
	eventually(t, 10*time.Second, "the forgotten job's files swept", func() bool {
		_, err := os.Lstat(jdir)
		return errors.Is(err, os.ErrNotExist)
	})
	// Two sweeps past the age of the running job's files: still there.
	old := time.Now().Add(-time.Hour)
	ldir := filepath.Join(cfg.OutputPath(), live.JobID)
	eventually(t, 10*time.Second, "the running job's files", func() bool {
		_, err := os.Lstat(ldir)
		return err == nil
	})
	if err := os.Chtimes(ldir, old, old); err != nil {
		t.Fatal(err)
	}
	if n := ts.out.Sweep(); n != 0 {
		t.Fatalf("sweep removed %d directories of a job in memory", n)
	}
	if _, err := os.Lstat(ldir); err != nil {
		t.Fatalf("running job's files: %v", err)
	}
	if _, err := ts.client.Kill(ctxT(t, 10*time.Second), live.JobID, ""); err != nil {
		t.Fatal(err)
	}
}

// A full disk degrades the job to memory only: it runs to its end, its
// output is all in memory as far as the ring holds it, the failure is
// counted and reported in its info. (A 1 MiB tmpfs as the output
// directory: needs root.)
func TestOutputOnDiskFull(t *testing.T) {
	cfg := diskConfig(t)
	cfg.Jobs.RingBytes = 4 << 20
	cfg.OutputSegmentBytes = 256 << 10
	cfg.OutputMaxBytes = 64 << 20
	mnt := filepath.Join(filepath.Dir(cfg.StateDir), "small")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	cfg.OutputDir = mnt
	ts := startServer(t, cfg)
	path, want := randomFile(t, t.TempDir(), "out", 3<<20, 4)
	info, fin, err := ts.client.SpawnWait(ctxT(t, 60*time.Second), protocol.SpawnArgs{
		Argv: []string{"cat", path}, Output: protocol.OutputDisk,
	}, 50*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: finished %v, %v", fin, err)
	}
	// (the files are written behind the job: the writer may meet the
	// full disk after the job has ended)
	eventually(t, 20*time.Second, "the full disk in the job's info", func() bool {
		info, err = ts.client.Status(ctxT(t, 10*time.Second), info.JobID)
		return err == nil && !info.OutputDisk && strings.Contains(info.OutputDiskError, "no space")
	})
	if info.Reason != protocol.ReasonExit || info.OutputEnd != int64(len(want)) {
		t.Fatalf("job did not run to its end: %s, %d bytes", info.Reason, info.OutputEnd)
	}
	out, _, lost, first := pollAll(t, ts.client, info.JobID)
	if lost != 0 || first != 0 || !bytes.Equal(out, want) {
		t.Fatalf("output after a full disk: lost %d, first %d, %d bytes of %d", lost, first, len(out), len(want))
	}
	var m dto.Metric
	if err := ts.metrics.OutputDiskErrors.Write(&m); err != nil || m.GetCounter().GetValue() < 1 {
		got := m.GetCounter().GetValue()
		t.Fatalf("output_disk_errors_total %v", got)
	}
}

// Job ids that are not safe path components never reach the file
// system; a symlink planted where a job's directory goes is replaced,
// never followed.
func TestOutputOnDiskHostilePaths(t *testing.T) {
	cfg := diskConfig(t)
	ts := startServer(t, cfg)
	for _, id := range []string{"..", ".", "../x", "a/b", "/etc", ".hidden", "-x", "a\x00b"} {
		_, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{JobID: id, Argv: []string{"true"}, Output: protocol.OutputDisk})
		if !isCode(err, protocol.CodeInvalidArgument) && !isCode(err, protocol.CodeBadRequest) {
			t.Errorf("spawn with id %q: %v, want invalid-argument", id, err)
		}
		if _, err := ts.client.Poll(ctxT(t, 10*time.Second), id, 0, 0); err == nil {
			t.Errorf("poll of id %q answered", id)
		}
	}
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(cfg.OutputPath(), "planted")); err != nil {
		t.Fatal(err)
	}
	// Polled and removed while no such job is known: not found, nothing followed.
	if _, err := ts.client.Poll(ctxT(t, 10*time.Second), "planted", 0, 0); !errors.Is(err, protocol.ErrNotFound) {
		t.Errorf("poll through a planted symlink: %v, want not-found", err)
	}
	if err := ts.client.Remove(ctxT(t, 10*time.Second), "planted"); !errors.Is(err, protocol.ErrNotFound) {
		t.Errorf("remove through a planted symlink: %v, want not-found", err)
	}
	info, fin, err := ts.client.SpawnWait(ctxT(t, 20*time.Second), protocol.SpawnArgs{JobID: "planted", Argv: []string{"echo", "hello"}, Output: protocol.OutputDisk}, 15*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: %v %v", fin, err)
	}
	if data, err := os.ReadFile(filepath.Join(victim, "keep")); err != nil || string(data) != "mine" {
		t.Fatalf("the symlink's target was touched: %q, %v", data, err)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 1 {
		t.Fatalf("files written through the symlink: %v", ents)
	}
	forgetBySpawning(t, ts.client, info.JobID)
	res, err := ts.client.Poll(ctxT(t, 10*time.Second), "planted", 0, 0)
	if err != nil || len(res.Chunks) != 1 || string(res.Chunks[0].Data) != "hello\n" {
		t.Fatalf("poll of the job from disk: %+v, %v", res, err)
	}
}

func isCode(err error, code protocol.Code) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Code == code
}

// A job the journal recovers after a restart (still in memory) reads
// what the ring no longer holds from its files, appended to again.
func TestOutputOnDiskRestoredJob(t *testing.T) {
	cfg := diskConfig(t)
	cfg.Jobs.MaxFinished = 100
	ts := startServer(t, cfg)
	path, want := randomFile(t, t.TempDir(), "out", 1<<20, 5)
	info, fin, err := ts.client.SpawnWait(ctxT(t, 30*time.Second), protocol.SpawnArgs{
		Argv: []string{"cat", path}, Output: protocol.OutputDisk}, 25*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: %v %v", fin, err)
	}
	ts = ts.restart(t)
	st, err := ts.client.Status(ctxT(t, 10*time.Second), info.JobID)
	if err != nil || !st.OutputDisk || st.RetainedFrom == 0 {
		t.Fatalf("restored job: %+v, %v (want output on disk, the ring holding the tail only)", st, err)
	}
	out, _, lost, first := pollAll(t, ts.client, info.JobID)
	if lost != 0 || first != 0 || !bytes.Equal(out, want) {
		t.Fatalf("restored job's output: lost %d, first %d, %d bytes of %d", lost, first, len(out), len(want))
	}
}

// A job no longer in memory is polled from its files by its name too:
// of the jobs on disk with that name, the one that ended last, also after
// a restart; an id comes before a name; a name no job on disk has, or
// that is not a name, is not-found.
func TestOutputOnDiskPollByName(t *testing.T) {
	cfg := diskConfig(t)
	ts := startServer(t, cfg)
	spawn := func(name, text string) string {
		t.Helper()
		info, fin, err := ts.client.SpawnWait(ctxT(t, 20*time.Second), protocol.SpawnArgs{
			Name: name, Argv: []string{"echo", text}, Output: protocol.OutputDisk}, 15*time.Second)
		if err != nil || !fin {
			t.Fatalf("spawn %s: finished %v, %v", name, fin, err)
		}
		forgetBySpawning(t, ts.client, info.JobID)
		return info.JobID
	}
	first := spawn("web", "first")
	second := spawn("web", "second")
	spawn("other", "other")
	check := func(when string) {
		t.Helper()
		res, err := ts.client.Poll(ctxT(t, 10*time.Second), "web", 0, 0)
		if err != nil || res.Job.JobID != second || res.Job.Name != "web" || len(res.Chunks) != 1 || string(res.Chunks[0].Data) != "second\n" {
			t.Fatalf("%s: poll web: %+v, %v", when, res, err)
		}
		if res, err := ts.client.Poll(ctxT(t, 10*time.Second), first, 0, 0); err != nil || string(res.Chunks[0].Data) != "first\n" {
			t.Fatalf("%s: poll of the first job by its id: %+v, %v", when, res, err)
		}
		for _, ref := range []string{"nosuch", "../web", "w*", "j-web", strings.Repeat("w", 100)} {
			if _, err := ts.client.Poll(ctxT(t, 10*time.Second), ref, 0, 0); !errors.Is(err, protocol.ErrNotFound) {
				t.Fatalf("%s: poll %.20q: %v, want not-found", when, ref, err)
			}
		}
	}
	check("forgotten")
	// A job whose id is the name of another on disk: the id comes first.
	info, fin, err := ts.client.SpawnWait(ctxT(t, 20*time.Second), protocol.SpawnArgs{
		JobID: "other", Argv: []string{"echo", "by id"}, Output: protocol.OutputDisk}, 15*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn with id other: %v %v", fin, err)
	}
	forgetBySpawning(t, ts.client, info.JobID)
	if res, err := ts.client.Poll(ctxT(t, 10*time.Second), "other", 0, 0); err != nil || string(res.Chunks[0].Data) != "by id\n" {
		t.Fatalf("poll other: %+v, %v (want the job of that id)", res, err)
	}
	ts = ts.restart(t)
	check("after a restart")
}
