package server

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// bigSpawn is a job within the protocol's limits whose spec is far larger
// than a finished job was thought to cost: argv of two 120 KiB arguments,
// env of two 60 KiB values (an audit held ~1.1 MB per finished job of
// this kind, and a journal of 89 MB for 400 of them).
func bigSpawn(tag string) protocol.SpawnArgs {
	return protocol.SpawnArgs{
		Argv:   []string{"true", tag + strings.Repeat("a", 120<<10), strings.Repeat("b", 120<<10)},
		Env:    map[string]string{"BIG_A": strings.Repeat("c", 60<<10), "BIG_B": strings.Repeat("d", 60<<10)},
		Labels: map[string]string{"tag": tag},
	}
}

// journalJobs reads the journal as a restarted supervisor would.
func journalJobs(t *testing.T, cfg Config) (size int64, running []journal.Record, finished []string) {
	t.Helper()
	b, err := os.ReadFile(cfg.JournalPath())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := journal.Parse(b)
	if err != nil || len(doc.Dropped) > 0 {
		t.Fatalf("journal does not load back: %v (dropped %v)", err, doc.Dropped)
	}
	for _, r := range doc.Jobs {
		if r.Finished() {
			finished = append(finished, r.JobID)
		} else {
			running = append(running, r)
		}
	}
	return int64(len(b)), running, finished
}

// TestFinishedJobsBoundedBySpecAndJournalBytes: finished jobs with large
// argv and env are charged what they keep to --max-finished-output (the
// oldest forgotten past it, health and the counts agreeing), and the
// journal stays within --journal-max-bytes: the running job always in it
// (cut down when it alone passes the bound), the newest finished jobs as
// far as the bound allows, in finish order; it loads back, and a restarted
// supervisor has those jobs.
func TestFinishedJobsBoundedBySpecAndJournalBytes(t *testing.T) {
	cfg := testConfig(t)
	cfg.Jobs.MaxFinishedOutput = 1 << 20
	cfg.JournalMaxBytes = 800 << 10
	cfg.JournalFlushInterval = time.Hour // (writes on changes only, and the ones below)
	ts := startServer(t, cfg)
	ctx := ctxT(t, 90*time.Second)
	var ids []string
	for i := range 8 {
		info, done, err := ts.client.SpawnWait(ctx, bigSpawn(string(rune('A'+i))), 30*time.Second)
		if err != nil || !done || info.ExitCode == nil || *info.ExitCode != 0 {
			t.Fatalf("job %d: done %v, exit %v, err %v", i, done, info.ExitCode, err)
		}
		ids = append(ids, info.JobID)
	}
	// ~240 KiB each: the newest four fit in 1 MiB.
	for i, id := range ids {
		_, err := ts.client.Status(ctx, id)
		if forgotten := i < 4; forgotten != (protocol.CodeOf(err) == protocol.CodeNotFound) {
			t.Fatalf("job %d of 8: status error %v; want forgotten=%v", i, err, forgotten)
		}
	}
	h, err := ts.client.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n, b := ts.jobs.FinishedRetained()
	if h.TotalJobs != 4 || h.ActiveJobs != 0 || n != 4 || b > cfg.Jobs.MaxFinishedOutput || b < 4*240<<10 || ts.jobs.Forgotten() != 4 {
		t.Fatalf("health %d known, %d active; retained %d jobs charged %d bytes, %d forgotten; want 4, 0, 4, 983040..1048576, 4",
			h.TotalJobs, h.ActiveJobs, n, b, ts.jobs.Forgotten())
	}

	run, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "exec sleep 300 #" + strings.Repeat("s", 100<<10)})
	if err != nil {
		t.Fatal(err)
	}
	ts.jw.write(false)
	size, running, finished := journalJobs(t, cfg)
	if size > cfg.JournalMaxBytes {
		t.Fatalf("journal of %d bytes; the bound is %d", size, cfg.JournalMaxBytes)
	}
	// The running job (~100 KiB) and two of the ~240 KiB finished ones fit.
	if len(running) != 1 || running[0].JobID != run.JobID || len(running[0].Shell) != len(run.Shell) || !slices.Equal(finished, ids[6:]) {
		t.Fatalf("journal has running %d, finished %v; want %s whole, and %v", len(running), finished, run.JobID, ids[6:])
	}

	// Running jobs alone pass the bound: the running record is cut down,
	// still naming its process; no finished job fits.
	setBound := func(v int64) {
		ts.jw.mu.Lock()
		ts.Server.cfg.JournalMaxBytes = v
		ts.jw.mu.Unlock()
	}
	setBound(64 << 10)
	ts.jw.write(true)
	size, running, finished = journalJobs(t, cfg)
	if size > 64<<10 || len(running) != 1 || len(finished) != 0 {
		t.Fatalf("journal of %d bytes, %d running and %v finished records; want at most 65536 bytes, 1 running, none finished", size, len(running), finished)
	}
	if r := running[0]; r.Pid != run.Pid || r.StartTicks == 0 || !strings.Contains(r.Shell, "truncated") || len(r.Shell) > 2048 {
		t.Fatalf("cut-down record: pid %d (want %d), start ticks %d, shell of %d bytes", r.Pid, run.Pid, r.StartTicks, len(r.Shell))
	}
	ts.jw.mu.Lock()
	cached := 0
	for _, c := range ts.jw.recCache {
		cached += len(c.b)
	}
	ts.jw.mu.Unlock()
	if cached > 64<<10 {
		t.Fatalf("%d bytes of records cached for a journal bounded at 65536", cached)
	}
	// Room again: the newest finished jobs come back, at the write that
	// follows the one that found room for them (it asks for it: they
	// waited for the next change or periodic write).
	setBound(800 << 10)
	ts.jw.write(false)
	eventually(t, 10*time.Second, "the finished jobs journaled again", func() bool {
		size, _, finished = journalJobs(t, cfg)
		return size <= 800<<10 && slices.Equal(finished, ids[6:])
	})

	// Shut down (the running job is ended and journaled) and start again.
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.Server.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if size, running, finished = journalJobs(t, cfg); size > 800<<10 || len(running) != 0 || !slices.Contains(finished, run.JobID) {
		t.Fatalf("final journal of %d bytes: running %d, finished %v", size, len(running), finished)
	}
	ts2 := startServer(t, cfg)
	for i, id := range ids[4:] {
		info, err := ts2.client.Status(ctx, id)
		if i < 2 {
			if protocol.CodeOf(err) != protocol.CodeNotFound {
				t.Fatalf("job %s, left out of the journal, was restored: %v", id, err)
			}
			continue
		}
		if err != nil || !slices.Equal(info.Argv, bigSpawn(string(rune('A'+4+i))).Argv) {
			t.Fatalf("restored job %s: %v (argv restored whole: %v)", id, err, err == nil && slices.Equal(info.Argv, bigSpawn(string(rune('A'+4+i))).Argv))
		}
	}
	if n, b := ts2.jobs.FinishedRetained(); b > cfg.Jobs.MaxFinishedOutput || n < 2 {
		t.Fatalf("restored jobs: %d charged %d bytes (bound %d)", n, b, cfg.Jobs.MaxFinishedOutput)
	}
}
