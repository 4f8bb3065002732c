package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func intp(v int) *int { return &v }

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
		err := m.Restore(journal.Record{JobID: id, State: protocol.StateExited, Reason: protocol.ReasonShutdown, Argv: []string{"true"},
			Service: &journal.Service{Spec: spec, Attempt: 3}}, false)
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
	ok := []journal.TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 4}, {Seq: 3, Stream: protocol.Stderr, Len: 4}}
	for _, c := range []struct {
		name   string
		chunks []journal.TailChunk
		want   bool
	}{
		{"exact", ok, true},
		{"none", nil, false},
		{"short", ok[:1], false},
		{"too long", []journal.TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 4}, {Seq: 3, Stream: protocol.Stdout, Len: 5}}, false},
		{"negative", []journal.TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: -4}, {Seq: 3, Stream: protocol.Stdout, Len: 12}}, false},
		{"seqs not rising", []journal.TailChunk{{Seq: 3, Stream: protocol.Stdout, Len: 4}, {Seq: 3, Stream: protocol.Stdout, Len: 4}}, false},
		{"seq 1 is the start", []journal.TailChunk{{Seq: 1, Stream: protocol.Stdout, Len: 4}, {Seq: 3, Stream: protocol.Stdout, Len: 4}}, false},
		{"last seq not the tail's", []journal.TailChunk{{Seq: 2, Stream: protocol.Stdout, Len: 4}, {Seq: 4, Stream: protocol.Stdout, Len: 4}}, false},
		{"unknown stream", []journal.TailChunk{{Seq: 2, Stream: "stdin", Len: 4}, {Seq: 3, Stream: protocol.Stdout, Len: 4}}, false},
	} {
		if got := tailChunksValid(&journal.Record{OutputTail: tail, OutputTailSeq: 3, OutputTailChunks: c.chunks}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
