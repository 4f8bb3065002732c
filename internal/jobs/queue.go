package jobs

import (
	"slices"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
)

// The queue: one-shot jobs spawned with Queue when every slot under
// MaxJobs is taken wait here (state queued, no process), in the order
// they were spawned, and start as slots free. A job holds a slot from
// its start to its end (Job.acct.slot, counted in m.active); a queued job
// holds none. The queue runner, one goroutine of the Manager, gives the
// slots out; a spawn without Queue takes a free slot at once, as before,
// even while jobs are queued (it would be refused otherwise).

// enqueueLocked queues j, whose life is Queued (m.mu held), and wakes the
// runner in case a slot is free.
func (m *Manager) enqueueLocked(j *Job) {
	m.queue = append(m.queue, j)
	m.kickQueue()
}

// kickQueue wakes the queue runner. It never blocks.
func (m *Manager) kickQueue() {
	select {
	case m.queueKick <- struct{}{}:
	default:
	}
}

// dequeueLocked takes j out of the queue if it is there (m.mu held): a
// queued job that ended (killed, shut down) before it got its slot.
func (m *Manager) dequeueLocked(j *Job) {
	if i := slices.Index(m.queue, j); i >= 0 {
		m.queue = slices.Delete(m.queue, i, i+1)
	}
}

// Queued counts the jobs waiting in the queue.
func (m *Manager) Queued() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}

// queueRunner starts queued jobs as slots free, until the Manager stops.
func (m *Manager) queueRunner() {
	defer m.wg.Done()
	for {
		select {
		case <-m.stop:
			return
		case <-m.queueKick:
		}
		for m.startNextQueued() {
		}
	}
}

// startNextQueued gives the first queued job a slot and starts it; false
// when there is no job to start or no free slot.
func (m *Manager) startNextQueued() bool {
	m.mu.Lock()
	if m.closed || len(m.queue) == 0 || m.active >= m.cfg.MaxJobs {
		m.mu.Unlock()
		return false
	}
	j := m.queue[0]
	m.queue = slices.Delete(m.queue, 0, 1)
	j.acct.slot = true
	m.active++
	m.mu.Unlock()

	j.mu.Lock()
	if j.life.State != Queued {
		// Ended meanwhile (a kill after it left the queue): its end gave
		// the slot back.
		j.mu.Unlock()
		return true
	}
	j.stepLocked(lifecycle.Dequeued{}) // (no effects)
	j.mu.Unlock()
	if err := j.start(); err != nil {
		m.log.Info("queued job did not start", "job", j.id, "err", err)
		return true
	}
	if m.hooks.Spawned != nil {
		m.hooks.Spawned()
	}
	return true
}
