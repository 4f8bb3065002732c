package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func intp(v int) *int { return &v }

// TestBackoffAppSupervisionSchedule: the app-supervision seed's example
// with its defaults: crashes at T+0, 5, 10, 15 s are restarted after
// 1, 2, 4, 8 s; the crash at T+20 s disables the app.
func TestBackoffAppSupervisionSchedule(t *testing.T) {
	b := newBackoff(protocol.RestartPolicy{Policy: protocol.RestartOnFailure})
	t0 := time.Unix(1_800_000_000, 0)
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}
	for i, w := range want {
		d, n, limited := b.next(t0.Add(time.Duration(i)*5*time.Second), time.Second)
		if limited || d != w || n != i+1 {
			t.Fatalf("crash %d: delay %v (want %v), in window %d, limited %v", i+1, d, w, n, limited)
		}
	}
	if _, n, limited := b.next(t0.Add(20*time.Second), time.Second); !limited || n != 5 {
		t.Fatalf("crash 5: limited %v in window %d; want the restart limit", limited, n)
	}
}

// TestBackoffDaemonSchedule: the daemon-supervisor seed's table with no
// crash limit: 1, 2, 4, ... 256 s, then 300 s (5 min) for ever; a run of
// more than 5 minutes resets the delay.
func TestBackoffDaemonSchedule(t *testing.T) {
	b := newBackoff(protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(0)})
	now := time.Unix(1_800_000_000, 0)
	want := []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300, 300}
	for i, w := range want {
		d, _, limited := b.next(now, 2*time.Second)
		if limited || d != time.Duration(w)*time.Second {
			t.Fatalf("crash %d: delay %v limited %v; want %ds", i+1, d, limited, w)
		}
		now = now.Add(d + 2*time.Second)
	}
	// A healthy run (longer than resetAfter, 5 min) starts over at 1 s.
	if d, _, _ := b.next(now, 6*time.Minute); d != time.Second {
		t.Fatalf("after a healthy run: delay %v; want 1s", d)
	}
	if d, _, _ := b.next(now, time.Second); d != 2*time.Second {
		t.Fatalf("crash after the reset: delay %v; want 2s", d)
	}
}

// TestBackoffWindow: failures older than the window no longer count
// toward the limit.
func TestBackoffWindow(t *testing.T) {
	b := newBackoff(protocol.RestartPolicy{Policy: protocol.RestartOnFailure, MaxRestarts: intp(3), RestartWindowMs: 10_000, RestartDelayMs: 100, MaxDelayMs: 100})
	t0 := time.Unix(1_800_000_000, 0)
	for _, at := range []time.Duration{0, time.Second, 11 * time.Second, 12 * time.Second} {
		if _, n, limited := b.next(t0.Add(at), 0); limited {
			t.Fatalf("limited at +%v with %d in the window", at, n)
		}
	}
	if _, n, limited := b.next(t0.Add(13*time.Second), 0); !limited || n != 3 {
		t.Fatalf("third failure within 10 s: limited %v, in window %d", limited, n)
	}
	b.reset()
	if _, n, limited := b.next(t0.Add(14*time.Second), 0); limited || n != 1 {
		t.Fatalf("after reset: limited %v, in window %d", limited, n)
	}
}

func TestBackoffWants(t *testing.T) {
	zero, one := intp(0), intp(1)
	for _, c := range []struct {
		policy string
		reason protocol.Reason
		code   *int
		want   bool
	}{
		{protocol.RestartOnFailure, protocol.ReasonExit, zero, false},
		{protocol.RestartOnFailure, protocol.ReasonExit, one, true},
		{protocol.RestartOnFailure, protocol.ReasonSignal, nil, true},
		{protocol.RestartOnFailure, protocol.ReasonWatchdog, nil, true},
		{protocol.RestartOnFailure, protocol.ReasonNoOutputTimeout, nil, true},
		{protocol.RestartOnFailure, protocol.ReasonSpawnError, nil, true},
		{protocol.RestartAlways, protocol.ReasonExit, zero, true},
		{protocol.RestartAlways, protocol.ReasonManualCancel, nil, false},
		{protocol.RestartAlways, protocol.ReasonStopped, nil, false},
		{protocol.RestartAlways, protocol.ReasonShutdown, nil, false},
		{protocol.RestartNever, protocol.ReasonExit, one, false},
	} {
		b := newBackoff(protocol.RestartPolicy{Policy: c.policy})
		if got := b.wants(c.reason, c.code); got != c.want {
			t.Errorf("%s after %s: restart %v, want %v", c.policy, c.reason, got, c.want)
		}
	}
}

// TestBackoffHugeMultiplier: the delay saturates at maxDelay, never overflows.
func TestBackoffHugeMultiplier(t *testing.T) {
	b := newBackoff(protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(0), BackoffMultiplier: 100, MaxDelayMs: 60_000})
	now := time.Unix(1_800_000_000, 0)
	var d time.Duration
	for i := 0; i < 500; i++ {
		d, _, _ = b.next(now, 0)
		now = now.Add(time.Hour) // outside every window
	}
	if d != time.Minute {
		t.Fatalf("delay after 500 failures: %v; want the 1 min cap", d)
	}
}

// TestLateKillOfEndedRunIsIgnored: a kill bound to a run that is over (a
// restart op or timer racing the run's own end) never reaches the next
// run, and signals between runs are refused (the last run's cgroup or
// group may belong to someone else by then).
func TestLateKillOfEndedRunIsIgnored(t *testing.T) {
	m := New(Config{MaxJobs: 10, Grace: time.Second}, nil, nil)
	defer m.Close(context.Background())
	info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"sleep", "30"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	j, _ := m.Get(info.JobID)
	j.mu.Lock()
	run1 := j.runDone
	j.mu.Unlock()
	if _, err := m.Restart(info.JobID); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		in := j.Info()
		if in.Attempt == 2 && in.State == protocol.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no second run: %+v", in)
		}
		time.Sleep(5 * time.Millisecond) // waiting for the process table, no event for it here
	}
	if _, err := j.kill(run1, protocol.ReasonManualRestart, 0); err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	killing, state := j.life.Killing, j.life.State
	j.mu.Unlock()
	if killing || state != Running {
		t.Fatalf("a kill bound to run 1 reached run 2 (killing %v, state %s)", killing, state)
	}

	// Between runs: no signal goes anywhere.
	crash, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"false"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, RestartDelayMs: 60_000}})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := m.Get(crash.JobID)
	for c.Info().State != protocol.StateRestarting {
		if time.Now().After(deadline) {
			t.Fatalf("never restarting: %+v", c.Info())
		}
		time.Sleep(5 * time.Millisecond) // as above
	}
	if err := c.Signal(SigTerm); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("signal while restarting: %v", err)
	}
	if in := c.Info(); in.Cgroup != "" {
		t.Fatalf("a restarting job names a cgroup: %+v", in)
	}
}

// TestRestoreRefusesInvalidServiceSpec: a journal record whose service
// spec would not pass spawn's checks (a tampered or damaged file) is
// restored as a plain finished job, never supervised with its values.
func TestRestoreRefusesInvalidServiceSpec(t *testing.T) {
	m := New(Config{}, nil, nil)
	defer m.Close(context.Background())
	bad := protocol.SpawnArgs{Argv: []string{"true"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways, BackoffMultiplier: -3, MaxRestarts: intp(0)}}
	good := protocol.SpawnArgs{Argv: []string{"true"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}}
	for id, spec := range map[string]protocol.SpawnArgs{"j-bad": bad, "j-good": good} {
		err := m.Restore(Snapshot{Info: protocol.JobInfo{JobID: id, State: protocol.StateExited, Reason: protocol.ReasonShutdown, Argv: []string{"true"}},
			Service: &ServiceState{Spec: spec, Attempt: 3}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Start("j-bad"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("start of a job with an invalid recorded spec: %v", err)
	}
	info, err := m.Start("j-good")
	if err != nil || info.Attempt != 4 {
		t.Fatalf("start of a valid recorded service: %+v %v", info, err)
	}
	j, _ := m.Get("j-good")
	_, _ = j.Kill(protocol.ReasonStopped, 0)
	<-j.Done()
}

// TestTailChunksValid: a journal's tail chunks are used only when they
// describe the tail exactly (the journal is input).
func TestTailChunksValid(t *testing.T) {
	tail := []byte("one\ntwo\n")
	ok := []TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 4}, {Seq: 3, Stream: protocol.Stderr, Len: 4}}
	for _, c := range []struct {
		name   string
		chunks []TailChunk
		want   bool
	}{
		{"exact", ok, true},
		{"none", nil, false},
		{"short", ok[:1], false},
		{"too long", []TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 4}, {Seq: 3, Stream: protocol.Stdout, Len: 5}}, false},
		{"negative", []TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: -4}, {Seq: 3, Stream: protocol.Stdout, Len: 12}}, false},
		{"seqs not rising", []TailChunk{{Seq: 3, Stream: protocol.Stdout, Len: 4}, {Seq: 3, Stream: protocol.Stdout, Len: 4}}, false},
		{"seq 1 is the start", []TailChunk{{Seq: 1, Stream: protocol.Stdout, Len: 4}, {Seq: 3, Stream: protocol.Stdout, Len: 4}}, false},
		{"last seq not the tail's", []TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 4}, {Seq: 4, Stream: protocol.Stdout, Len: 4}}, false},
		{"unknown stream", []TailChunk{{Seq: 2, Stream: "stdin", Len: 4}, {Seq: 3, Stream: protocol.Stdout, Len: 4}}, false},
	} {
		if got := tailChunksValid(Snapshot{Tail: tail, TailSeq: 3, TailChunks: c.chunks}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBackoffKeepsFewEnds: a service restarting every few milliseconds
// keeps (and journals) a bounded number of run ends: the newest
// MaxRestarts decide the limit; without a limit, maxEndsKept serve the
// report. (A leak audit saw a crash-looping service's journal record grow
// from 92 to 239 KB in three minutes.)
func TestBackoffKeepsFewEnds(t *testing.T) {
	now := time.Now()
	unlimited := newBackoff(protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(0)})
	for i := range 5000 {
		if _, _, limited := unlimited.next(now.Add(time.Duration(i)*time.Millisecond), 0); limited {
			t.Fatal("limited without a limit")
		}
	}
	if n := len(unlimited.ends); n > maxEndsKept {
		t.Fatalf("%d ends kept", n)
	}
	limited := newBackoff(protocol.RestartPolicy{Policy: protocol.RestartAlways, MaxRestarts: intp(50)})
	for i := range 49 {
		if _, in, lim := limited.next(now.Add(time.Duration(i)*time.Millisecond), 0); lim || in != i+1 {
			t.Fatalf("end %d: in window %d, limited %v", i+1, in, lim)
		}
	}
	if _, in, lim := limited.next(now.Add(49*time.Millisecond), 0); !lim || in != 50 {
		t.Fatalf("50th end: in window %d, limited %v", in, lim)
	}
	if len(limited.ends) > 50 {
		t.Fatalf("%d ends kept with a limit of 50", len(limited.ends))
	}
}
