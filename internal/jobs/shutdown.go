package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// closing reports whether Drain or Close was called.
func (m *Manager) closing() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Drain stops accepting spawns (they get CodeShuttingDown); running jobs
// are left alone.
func (m *Manager) Drain() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

// Wait blocks until every job that exists now has finished, or ctx ends.
func (m *Manager) Wait(ctx context.Context) {
	m.mu.Lock()
	js := make([]*Job, 0, len(m.jobs))
	for _, j := range m.jobs {
		js = append(js, j)
	}
	m.mu.Unlock()
	for _, j := range js {
		select {
		case <-j.Done():
		case <-ctx.Done():
			return
		}
	}
}

// Close stops accepting spawns, terminates every running job through the
// normal kill path (reason supervisor-shutdown) and waits for them to be
// finalized, or for ctx to end. It is idempotent.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	js := make([]*Job, 0, len(m.jobs))
	for _, j := range m.jobs {
		js = append(js, j)
	}
	m.mu.Unlock()
	for _, j := range js {
		_, _ = j.Kill(protocol.ReasonShutdown, 0)
	}
wait:
	for _, j := range js {
		select {
		case <-j.Done():
		case <-ctx.Done():
			// Escalate: nobody gets more grace than the caller allows.
			left := 0
			for _, j := range js {
				if done, _ := j.Kill(protocol.ReasonShutdown, sigKill); !done {
					left++
				}
			}
			m.log.Warn("shutdown: jobs still running when the time allowed ran out are killed (SIGKILL)", "jobs", left, "cause", context.Cause(ctx))
			// A SIGKILLed job ends at once (unless its processes are stuck
			// in the kernel): that is a complete shutdown, nothing left
			// behind. Jobs not ended even so are an error.
			if notEnded := waitJobs(js, killReapBound); notEnded > 0 {
				// The manager's own goroutines (sweeper, escape watcher,
				// idle runners) stop; jobs' waiters end with their jobs.
				m.stopO.Do(func() { m.stopCtx = ctx; close(m.stop) })
				return fmt.Errorf("close job manager: %d jobs not ended %v after SIGKILL: %w", notEnded, killReapBound, ctx.Err())
			}
			break wait
		}
	}
	m.closeO.Do(func() {
		m.stopO.Do(func() { m.stopCtx = ctx; close(m.stop) })
		m.wg.Wait()
		if m.devNull != nil {
			m.devNull.Close()
		}
	})
	return nil
}

// killReapBound is how long Close waits for jobs it SIGKILLed to end.
const killReapBound = 5 * time.Second

// waitJobs waits up to d for every job in js to end and returns how many
// did not.
func waitJobs(js []*Job, d time.Duration) int {
	t := time.NewTimer(d)
	defer t.Stop()
	for i, j := range js {
		select {
		case <-j.Done():
		case <-t.C:
			n := 0
			for _, j := range js[i:] {
				if !over(j.Done()) {
					n++
				}
			}
			return n
		}
	}
	return 0
}
