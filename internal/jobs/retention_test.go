package jobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestFinishedJobsBounded: past MaxFinished finished jobs, or
// MaxFinishedOutput bytes of their output, the oldest finished one-shot
// jobs are forgotten (not-found), newest kept; running jobs and services
// are not touched; counts stay right through remove and sweep.
func TestFinishedJobsBounded(t *testing.T) {
	m := New(Config{MaxJobs: 10, MaxFinished: 5, MaxFinishedOutput: 1 << 20}, nil, nil)
	defer m.Close(context.Background())
	running, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 12 {
		info, _ := runJob(t, m, protocol.SpawnArgs{Argv: []string{"true"}})
		ids = append(ids, info.JobID)
	}
	for i, id := range ids {
		_, err := m.Get(id)
		if forgotten := i < 7; forgotten != (err != nil) {
			t.Fatalf("job %d of 12: Get error %v; want forgotten=%v (5 kept)", i, err, forgotten)
		}
	}
	if _, err := m.Get(running.JobID); err != nil {
		t.Fatalf("the running job was forgotten: %v", err)
	}
	if got := m.Forgotten(); got != 7 {
		t.Fatalf("Forgotten() = %d, want 7", got)
	}

	// Remove one of the kept ones: the bound counts what is left.
	if err := m.Remove(ids[11]); err != nil {
		t.Fatal(err)
	}
	info, _ := runJob(t, m, protocol.SpawnArgs{Argv: []string{"true"}})
	for _, id := range append(ids[7:11], info.JobID) {
		if _, err := m.Get(id); err != nil {
			t.Fatalf("kept job %s: %v (a removed job still counted)", id, err)
		}
	}

	// Output bytes: 400 KiB per job, at most 1 MiB retained: two jobs.
	m.Sweep() // (recounts; nothing is old enough to go)
	var big []string
	for range 4 {
		info, out := runJob(t, m, protocol.SpawnArgs{Shell: "head -c 409600 /dev/zero"})
		if len(out) != 409600 {
			t.Fatalf("job printed %d bytes", len(out))
		}
		big = append(big, info.JobID)
	}
	for i, id := range big {
		_, err := m.Get(id)
		if forgotten := i < 2; forgotten != (err != nil) {
			t.Fatalf("400 KiB job %d of 4: Get error %v; want forgotten=%v", i, err, forgotten)
		}
	}
	m.mu.Lock()
	n, b := m.recentN, m.recentBytes
	m.mu.Unlock()
	// (what they hold: their output, its event headers and a little per
	// chunk, within the 1 MiB bound)
	if n != 2 || b < 2*409600 || b > 1<<20 {
		t.Fatalf("recent counts %d jobs, %d bytes; want 2, about %d", n, b, 2*409600)
	}
	m.Sweep()
	m.mu.Lock()
	n2, b2 := m.recentN, m.recentBytes
	m.mu.Unlock()
	if n2 != n || b2 != b {
		t.Fatalf("sweep recounted %d jobs, %d bytes; incremental counts were %d, %d", n2, b2, n, b)
	}
	rj, err := m.Get(running.JobID)
	if err != nil {
		t.Fatalf("the running job was forgotten: %v", err)
	}
	if _, err := rj.Kill(protocol.ReasonManualCancel, 0); err != nil {
		t.Fatal(err)
	}
	<-rj.Done()
}

// TestRecentStaysCompact: with a long sweep interval, the finish-order
// list does not grow with every job ever finished: emptied entries are
// dropped as the bound forgets jobs.
func TestRecentStaysCompact(t *testing.T) {
	m := New(Config{MaxJobs: 10, MaxFinished: 100, CleanupInterval: time.Hour}, nil, nil)
	defer m.Close(context.Background())
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range 10000 {
		j := &Job{id: fmt.Sprintf("j-%d", i)}
		m.finN++
		j.acct.finN = m.finN
		m.jobs[j.id] = j
		m.recent = append(m.recent, finished{finN: j.acct.finN, j: j})
		m.recentN++
		m.boundRecentLocked(j)
	}
	if m.recentN != 100 || len(m.jobs) != 100 {
		t.Fatalf("%d counted, %d jobs known; want 100", m.recentN, len(m.jobs))
	}
	if len(m.recent) > 2500 {
		t.Fatalf("recent has %d entries for 100 jobs", len(m.recent))
	}
	if got := m.forgotten.Load(); got != 0 {
		t.Fatalf("forgotten counted %d (boundRecentLocked's count is the caller's to add)", got)
	}
	clear(m.jobs) // (fakes: Close would wait for them to finish)
}

// TestAfterDone: functions registered run once, with the final info,
// when the job finishes; cancelled ones do not run and are forgotten;
// nothing registers on a finished job.
func TestAfterDone(t *testing.T) {
	m := New(Config{MaxJobs: 10}, nil, nil)
	defer m.Close(context.Background())
	info, err := m.Spawn(protocol.SpawnArgs{Shell: "read x; exit 7", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	j, err := m.Get(info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan protocol.JobInfo, 2)
	if _, ok := j.AfterDone(func(i protocol.JobInfo) { got <- i }); !ok {
		t.Fatal("AfterDone on a running job did not register")
	}
	for range 100 { // waits that ran out: registered and cancelled
		cancel, ok := j.AfterDone(func(protocol.JobInfo) { t.Error("a cancelled function ran") })
		if !ok {
			t.Fatal("AfterDone on a running job did not register")
		}
		cancel()
	}
	j.mu.Lock()
	n := len(j.afterDone)
	j.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d functions registered; want 1 (the cancelled ones forgotten)", n)
	}
	if _, err := j.Write([]byte("go\n"), true); err != nil {
		t.Fatal(err)
	}
	final := <-got
	if final.State != protocol.StateExited || final.ExitCode == nil || *final.ExitCode != 7 {
		t.Fatalf("AfterDone got %+v; want the final state, exit code 7", final)
	}
	if _, ok := j.AfterDone(func(protocol.JobInfo) {}); ok {
		t.Fatal("AfterDone registered on a finished job")
	}
	select {
	case i := <-got:
		t.Fatalf("a function ran twice: %+v", i)
	default:
	}
}

// TestFinishedServicesBounded: services whose supervision ended are not
// forgotten by retention (they may be started again), but past
// MaxFinishedServices the one that finished longest ago is (they were
// kept for ever: a gateway stopping a service per session grew without
// bound; found by a churn audit). A service started again is no longer
// a finished one, and counts anew from its next end.
func TestFinishedServicesBounded(t *testing.T) {
	m := New(Config{MaxJobs: 10, MaxFinishedServices: 2, Retention: time.Nanosecond}, discard(), nil)
	defer m.Close(context.Background())
	finish := func(id string) string {
		t.Helper()
		if id == "" {
			j, _, err := m.SpawnJob(protocol.SpawnArgs{Shell: "exit 0", Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}})
			if err != nil {
				t.Fatal(err)
			}
			id = j.id
		} else if _, err := m.Start(id); err != nil {
			t.Fatal(err)
		}
		j, err := m.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return j.Finished() })
		return id
	}
	s1, s2 := finish(""), finish("")
	finish(s1) // (started again and finished: now the newest)
	s3 := finish("")
	for id, want := range map[string]bool{s1: true, s2: false, s3: true} {
		if _, err := m.Get(id); (err == nil) != want {
			t.Errorf("service %s kept: %v, want %v", id, err == nil, want)
		}
	}
	if n := m.Forgotten(); n != 1 {
		t.Errorf("forgotten %d, want 1", n)
	}
	// Retention leaves finished services alone.
	if n := m.Sweep(); n != 0 {
		t.Errorf("the sweep removed %d", n)
	}
}
