package server

import (
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestSpawnQueueOverTheWire: with every slot taken, spawn with queue
// answers a queued job (list --state queued finds it, health counts it),
// one without is refused as too-many-jobs, one past --max-queued too; a
// wait on the queued job ends when it has run, once the slot freed.
func TestSpawnQueueOverTheWire(t *testing.T) {
	cfg := testConfig(t)
	cfg.Jobs.MaxJobs, cfg.Jobs.MaxQueued = 1, 1
	ts := startServer(t, cfg)
	c := ts.client
	ctx := ctxT(t, 30*time.Second)
	busy, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "echo ran", Queue: true})
	if err != nil || q.State != protocol.StateQueued || q.Pid != 0 {
		t.Fatalf("queued spawn: %+v, %v", q, err)
	}
	if _, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}}); protocol.CodeOf(err) != protocol.CodeTooManyJobs {
		t.Fatalf("spawn without queue past --max-jobs: %v", err)
	}
	if _, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, Queue: true}); protocol.CodeOf(err) != protocol.CodeTooManyJobs {
		t.Fatalf("queued spawn past --max-queued: %v", err)
	}
	if _, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, Queue: true,
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("a queued service: %v, want invalid-argument", err)
	}
	jobs, err := c.ListJobs(ctx, protocol.ListJobsArgs{State: protocol.StateQueued})
	if err != nil || len(jobs) != 1 || jobs[0].JobID != q.JobID {
		t.Fatalf("list --state queued: %v, %v", jobs, err)
	}
	if h, err := c.Health(ctx); err != nil || h.QueuedJobs != 1 || h.ActiveJobs != 1 {
		t.Fatalf("health: %+v, %v", h, err)
	}
	if _, err := c.Kill(ctx, busy.JobID, "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	info, finished, err := c.Wait(ctx, q.JobID, 20*time.Second)
	if err != nil || !finished || info.Reason != protocol.ReasonExit || info.StdoutBytes != 4 {
		t.Fatalf("the queued job once the slot freed: %+v, finished %v, %v", info, finished, err)
	}
}
