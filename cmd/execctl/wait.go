package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// WaitCommand waits for jobs to end.
type WaitCommand struct{}

// Synopsis implements command.
func (*WaitCommand) Synopsis() string {
	return "wait for jobs to end: wait JOB... (exit code: the last job's, as with spawn --wait)"
}

// Run implements command.
func (*WaitCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("wait", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return 0, &usageError{msg: "want at least one JOB", hint: "execctl wait JOB1 JOB2"}
	}
	code, reached := exitOK, false
	ids, err := g.resolveJobs(ctx, fs.Args(), true)
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		c, err := waitEnd(ctx, g, id, reached)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return exitInterrupted, nil // (Ctrl-C: the jobs go on)
		}
		if err != nil {
			return 0, g.hostErr(id, err)
		}
		code, reached = c, true
	}
	return code, nil
}

// waitEnd waits for job id to end through the wait op (no event socket
// needed; a wait that runs out is renewed) and returns its exit code (as
// followJob). A supervisor that goes away meanwhile is waited for up to
// reconnectFor: one that restarts knows the job from its journal (and
// ended it, if it was running when the supervisor died). Until a
// supervisor was reached (reached: it answered, or took a request here
// before), only for firstReachFor: there is probably none.
func waitEnd(ctx context.Context, g *globals, id string, reached bool) (int, error) {
	var lost time.Time
	// shutdownEnd is the end (endedAt) of the last supervisor-shutdown
	// waited through: reported again, the service was not resumed.
	var shutdownEnd int64
	for {
		job, finished, err := g.on(id).Wait(ctx, id, protocol.MaxWaitMs*time.Millisecond)
		var ce *client.ConnectError
		switch {
		case err == nil && finished && job.Restart != "" && job.Reason == protocol.ReasonShutdown && job.EndedAt != shutdownEnd:
			// A service its supervisor's shutdown ended goes on under the
			// next one (--resume-services): wait for it and ask it (each
			// time: a later shutdown too).
			shutdownEnd = job.EndedAt
			if awaitNextSupervisor(ctx, g, id) {
				lost, reached = time.Time{}, true
				continue
			}
			return waitEnded(g, id, job)
		case err == nil && finished:
			return waitEnded(g, id, job)
		case err == nil: // (the wait ran out: wait again)
			lost, reached = time.Time{}, true
			continue
		case !errors.As(err, &ce) || ctx.Err() != nil:
			return 0, fmt.Errorf("waiting for job %s: %w", id, err)
		case ce.Lost:
			// It had taken the connection (a held wait, say): a
			// supervisor was there, and may be restarting.
			reached = true
		}
		if lost.IsZero() {
			lost = time.Now()
		}
		if time.Since(lost) > reconnectFor || !reached && time.Since(lost) > firstReachFor {
			return 0, fmt.Errorf("waiting for job %s: %w", id, err)
		}
		select { // the supervisor is restarting: ask again shortly
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// awaitNextSupervisor waits (up to reconnectFor) for a supervisor (job
// id's) other than the one shutting down now (or none) to answer, and
// reports whether one did. One answering that is not shutting down is the next already:
// true at once (ask it; if it did not resume the service, it says so).
func awaitNextSupervisor(ctx context.Context, g *globals, id string) bool {
	prev := ""
	if h, err := g.on(id).Health(ctx); err == nil {
		if !h.Draining {
			return true
		}
		prev = h.InstanceID
	}
	deadline := time.Now().Add(reconnectFor)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond): // (the supervisor is restarting)
		}
		if h, err := g.on(id).Health(ctx); err == nil && h.InstanceID != prev {
			return true
		}
	}
	return false
}

// waitEnded reports the end of job id (finished: its final state) as
// wait does: the wait op's result with --json, and its exit code.
func waitEnded(g *globals, id string, job protocol.JobInfo) (int, error) {
	if g.json { // (the wait op's result, as on the wire)
		if err := printJSON(g.stdout, g.spawnResultJSON(protocol.SpawnResult{JobID: id, Job: job, Finished: true})); err != nil {
			return 0, err
		}
	}
	return exitCodeOf(protocol.ExitPayload{Reason: job.Reason, ExitCode: job.ExitCode, Signal: job.Signal, Error: job.Error}, g, id), nil
}

// reconnectFor bounds how long waitEnd waits for a supervisor that went
// away to answer again (a variable for tests).
var reconnectFor = 30 * time.Second

// firstReachFor bounds how long wait tries to reach a supervisor it has
// not reached yet (one restarting just then is back within it).
const firstReachFor = 3 * time.Second
