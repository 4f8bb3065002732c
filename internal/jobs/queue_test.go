package jobs

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestQueueWaitsForASlot: past MaxJobs a spawn with Queue waits in state
// queued (no process) in the order spawned, one without is refused as
// before; a queued job killed ends unstarted; a slot freed starts the
// first queued job; past MaxQueued a queued spawn is refused too.
func TestQueueWaitsForASlot(t *testing.T) {
	m := New(Config{MaxJobs: 1, MaxQueued: 2}, nil, nil)
	defer m.Close(context.Background())
	sleep := protocol.SpawnArgs{Argv: []string{"sleep", "30"}}
	queued := sleep
	queued.Queue = true

	a, _, err := m.SpawnJob(sleep)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Kill(protocol.ReasonManualCancel, syscall.SIGKILL)
	if _, _, err := m.SpawnJob(sleep); !errors.Is(err, ErrTooManyJobs) {
		t.Fatalf("spawn past the limit without queue: %v", err)
	}
	b, info, err := m.SpawnJob(queued)
	if err != nil || info.State != protocol.StateQueued || info.Pid != 0 {
		t.Fatalf("queued spawn: %+v, %v", info, err)
	}
	defer b.Kill(protocol.ReasonManualCancel, syscall.SIGKILL)
	c, _, err := m.SpawnJob(queued)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.SpawnJob(queued); !errors.Is(err, ErrTooManyJobs) {
		t.Fatalf("queued spawn past --max-queued: %v", err)
	}
	if n := m.Queued(); n != 2 {
		t.Fatalf("%d queued, want 2", n)
	}

	// c is killed while it waits: it ends unstarted.
	if already, err := c.Kill(protocol.ReasonManualCancel, 0); err != nil || already {
		t.Fatalf("kill of a queued job: %v %v", already, err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the queued job did not end when killed")
	}
	if ci := c.Info(); ci.State != protocol.StateExited || ci.Reason != protocol.ReasonManualCancel || ci.Pid != 0 || ci.StartedAt != 0 || ci.EndedAt == 0 {
		t.Fatalf("queued job killed: %+v", ci)
	}
	if n := m.Queued(); n != 1 {
		t.Fatalf("%d queued after the kill, want 1", n)
	}

	// a ends: b gets the slot.
	if _, err := a.Kill(protocol.ReasonManualCancel, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return b.Info().State == protocol.StateRunning })
	if bi := b.Info(); bi.Pid <= 0 || m.Queued() != 0 {
		t.Fatalf("queued job after a slot freed: %+v, %d still queued", bi, m.Queued())
	}
	if active, _ := m.Counts(); active != 1 {
		t.Fatalf("%d jobs hold a slot, want 1", active)
	}
}

// TestQueueOrderAndShutdown: queued jobs start in the order spawned, as
// slots free; a spawn with queue waits behind them even when a slot is
// free; those still queued when the Manager closes end as shutdown,
// unstarted.
func TestQueueOrderAndShutdown(t *testing.T) {
	m := New(Config{MaxJobs: 1}, nil, nil)
	closed := false
	defer func() {
		if !closed {
			m.Close(context.Background())
		}
	}()
	first, _, err := m.SpawnJob(protocol.SpawnArgs{Shell: "exit 0", Queue: true})
	if err != nil {
		t.Fatal(err)
	}
	var order []*Job
	for range 3 {
		j, _, err := m.SpawnJob(protocol.SpawnArgs{Shell: "sleep 0.05", Queue: true})
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, j)
	}
	last, _, err := m.SpawnJob(protocol.SpawnArgs{Argv: []string{"sleep", "30"}, Queue: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return last.Info().State == protocol.StateRunning })
	prev := first.Info()
	for _, j := range order {
		i := j.Info()
		if i.State != protocol.StateExited || i.Reason != protocol.ReasonExit || i.StartedAt < prev.EndedAt {
			t.Fatalf("queued job %s: %+v; want exited, started after the one before ended (%d)", i.JobID, i, prev.EndedAt)
		}
		prev = i
	}
	waiting, _, err := m.SpawnJob(protocol.SpawnArgs{Argv: []string{"sleep", "30"}, Queue: true})
	if err != nil {
		t.Fatal(err)
	}
	closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m.Close(ctx)
	if i := waiting.Info(); i.State != protocol.StateExited || i.Reason != protocol.ReasonShutdown || i.Pid != 0 {
		t.Fatalf("a job still queued at the close: %+v", i)
	}
}
