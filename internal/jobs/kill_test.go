package jobs

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestCleanupKillCountedBeforeDone: a job that needed SIGKILL after its
// grace is counted (the CleanupKill hook) by the time it is seen finished:
// the count was made after the job's lock was released, and a job could
// end and be waited for before it (a metrics test saw 0 kills, want 1).
func TestCleanupKillCountedBeforeDone(t *testing.T) {
	var kills atomic.Int64
	m := New(Config{MergeInterval: time.Millisecond}, discard(), nil, WithHooks(Hooks{
		CleanupKill: func(string) { kills.Add(1) },
	}))
	defer m.Close(context.Background())
	for i := range 5 {
		// (an ignored signal stays ignored across exec)
		info, err := m.Spawn(protocol.SpawnArgs{Shell: "trap '' TERM; echo up; exec sleep 30", GraceMs: 20})
		if err != nil {
			t.Fatal(err)
		}
		j, _ := m.Get(info.JobID)
		waitFor(t, func() bool { return j.Info().StdoutBytes > 0 }) // (the trap is set)
		if _, err := j.Kill(protocol.ReasonManualCancel, 0); err != nil {
			t.Fatal(err)
		}
		<-j.Done()
		if got := kills.Load(); got != int64(i+1) {
			t.Fatalf("job %d finished with %d cleanup kills counted, want %d", i, got, i+1)
		}
		if r := j.Info().Reason; r != protocol.ReasonManualCancel {
			t.Fatalf("reason %s", r)
		}
	}
}
