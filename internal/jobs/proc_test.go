package jobs

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestStartTicksFromBootClock: the start time a job's fingerprint gets
// from the boot clock read around its fork is /proc's, for every job that
// got one (most: a fork is far shorter than a tick); the others read it
// from /proc, as before (a fork and exec that spanned a tick boundary:
// a third of them under -race here). A wrong one would make the next supervisor take
// its own orphan for a reused pid and leave it running.
func TestStartTicksFromBootClock(t *testing.T) {
	m := New(Config{MergeInterval: time.Millisecond}, nil, nil)
	defer m.Close(context.Background())
	if m.tickNanos.Load() == 0 {
		t.Skip("no AT_CLKTCK in the auxiliary vector: start times are read from /proc")
	}
	var js []*Job
	defer func() {
		for _, j := range js {
			_, _ = j.Kill(protocol.ReasonManualCancel, 0)
			<-j.Done()
		}
	}()
	fromClock := 0
	for i := 0; i < 40; i++ {
		info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"sleep", "30"}})
		if err != nil {
			t.Fatal(err)
		}
		j, _ := m.Get(info.JobID)
		js = append(js, j)
		j.mu.Lock()
		clock := j.run.startTicks
		j.mu.Unlock()
		if clock != 0 {
			fromClock++
		}
		sn := j.Snapshot()
		want, err := proc.StartTicks(info.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if sn.Record.StartTicks != want {
			t.Fatalf("job %d: fingerprint %d (from the clock: %v), /proc says %d", i, sn.Record.StartTicks, clock != 0, want)
		}
	}
	if m.tickNanos.Load() == 0 {
		t.Fatal("the boot clock was found wrong and turned off")
	}
	if fromClock == 0 {
		// (a fork and exec taking a tick each time: on no machine)
		t.Errorf("no fingerprint of 40 came from the boot clock")
	}
	t.Logf("%d of 40 fingerprints from the boot clock", fromClock)
}

// TestStartTicksMismatchTurnsClockOff: a fingerprint from the boot clock
// that /proc contradicts is not used, and the clock is not used again.
func TestStartTicksMismatchTurnsClockOff(t *testing.T) {
	m := New(Config{}, nil, nil)
	defer m.Close(context.Background())
	m.tickNanos.Store(1e7)
	m.tickChecks.Store(1)
	real, err := proc.StartTicks(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.startTicksTrusted(&child{pid: os.Getpid(), startTicks: real + 1}) || m.tickNanos.Load() != 0 {
		t.Fatalf("a wrong fingerprint was trusted (tick %d)", m.tickNanos.Load())
	}
	if m.startTicksTrusted(&child{pid: os.Getpid(), startTicks: real}) {
		t.Fatal("the clock is still used after a mismatch")
	}
}
