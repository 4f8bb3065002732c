package jobs

import (
	"cmp"
	"slices"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// addRecentLocked appends finished one-shot job j (finN set, output
// final) to recent, charging what it retains (its output and spec), and
// applies the bounds; it returns how many jobs they forgot. m.mu must be
// held, and j.mu (or j not yet visible).
func (m *Manager) addRecentLocked(j *Job) int {
	j.compactFinishedLocked()
	j.acct.finBytes = int64(j.out.ring.cost) + j.finishedCostLocked()
	m.recent = append(m.recent, finished{finN: j.acct.finN, j: j})
	m.recentN++
	m.recentBytes += j.acct.finBytes
	return m.boundRecentLocked(j)
}

// boundRecentLocked forgets the oldest finished one-shot jobs (never
// keep, the one just finished) while more than MaxFinished are retained
// or they hold more than MaxFinishedOutput bytes (output, argv and the
// rest of what they keep: Job.acct.finBytes). It returns how many it
// forgot. m.mu must be held.
func (m *Manager) boundRecentLocked(keep *Job) int {
	n := 0
	for (m.recentN > m.cfg.MaxFinished || m.recentBytes > m.cfg.MaxFinishedOutput) && m.recentHead < len(m.recent) {
		f := &m.recent[m.recentHead]
		if f.j == keep {
			break
		}
		m.recentHead++
		if f.j == nil {
			continue
		}
		if m.jobs[f.j.id] == f.j { // (else the sweep removed it already)
			m.forgetLocked(f.j)
			n++
		}
		m.recentN--
		m.recentBytes -= f.j.acct.finBytes
		f.j = nil
	}
	// Emptied entries are dropped here too, not only by the sweep (which
	// may be an hour away): recent stays proportional to what it holds.
	if h := m.recentHead; h > 1024 && h > len(m.recent)/2 {
		k := copy(m.recent, m.recent[h:])
		clear(m.recent[k:])
		m.recent = m.recent[:k]
		m.recentHead = 0
	}
	return n
}

// addFinishedServiceLocked notes service j's supervision ended, then
// forgets the services that finished longest ago while more than
// MaxFinishedServices are kept (never j); it returns how many it forgot.
// m.mu must be held.
func (m *Manager) addFinishedServiceLocked(j *Job) int {
	m.noteFinishedServiceLocked(j)
	if len(m.finSvcs) <= m.cfg.MaxFinishedServices {
		return 0
	}
	// Entries of services started again (their end number changed) or
	// removed since are dropped first.
	kept := m.finSvcs[:0]
	for _, f := range m.finSvcs {
		if m.jobs[f.j.id] == f.j && f.j.acct.svcFinN.Load() == f.finN {
			kept = append(kept, f)
		}
	}
	clear(m.finSvcs[len(kept):])
	m.finSvcs = kept
	n := 0
	for len(m.finSvcs) > m.cfg.MaxFinishedServices && m.finSvcs[0].j != j {
		old := m.finSvcs[0].j
		m.forgetLocked(old)
		delete(m.live, old.id)
		m.finSvcs = m.finSvcs[1:]
		n++
	}
	if n > 0 {
		m.finSvcs = slices.Clone(m.finSvcs) // (the forgotten ones' room)
	}
	return n
}

// noteFinishedServiceLocked adds service j, whose supervision ended, to
// finSvcs. m.mu must be held.
func (m *Manager) noteFinishedServiceLocked(j *Job) {
	m.svcFinN++
	j.acct.svcFinN.Store(m.svcFinN)
	m.finSvcs = append(m.finSvcs, finished{finN: m.svcFinN, j: j})
}

// noteForgotten counts n jobs forgotten early (services: finished
// services past MaxFinishedServices) and says so in the log (at most once
// a minute).
func (m *Manager) noteForgotten(n int, services bool) {
	total := m.forgotten.Add(uint64(n))
	m.mu.Lock()
	now := m.now()
	log := now.Sub(m.forgotLogged) >= time.Minute
	if log {
		m.forgotLogged = now
	}
	m.mu.Unlock()
	if log && services {
		m.log.Warn("finished services forgotten (those whose supervision ended longest ago) past --max-finished-services; remove the services no longer needed (execctl remove), or raise it",
			"forgotten", total, "maxFinishedServices", m.cfg.MaxFinishedServices)
	} else if log {
		m.log.Warn("finished jobs forgotten before their retention period ended, to keep memory bounded; raise --max-finished-jobs or --max-finished-output, or shorten --finished-job-retention",
			"forgotten", total, "maxFinishedJobs", m.cfg.MaxFinished, "maxFinishedOutput", m.cfg.MaxFinishedOutput)
	}
	m.changed()
}

// Forgotten is the number of finished jobs forgotten before their
// retention period ended (MaxFinished, MaxFinishedOutput).
func (m *Manager) Forgotten() uint64 { return m.forgotten.Load() }

// FinishedRetained returns how many finished one-shot jobs retention
// holds and the bytes charged for them to MaxFinishedOutput.
func (m *Manager) FinishedRetained() (n int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recentN, m.recentBytes
}

func (m *Manager) sweeper() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.CleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.Sweep()
		}
	}
}

// Sweep forgets finished one-shot jobs older than the retention period and
// returns how many it removed. Services stay until removed.
func (m *Manager) Sweep() int {
	cutoff := m.now().Add(-m.cfg.Retention)
	m.mu.Lock()
	var victims []*Job
	for _, j := range m.jobs {
		victims = append(victims, j)
	}
	m.mu.Unlock()
	n := 0
	for _, j := range victims {
		if j.isService() {
			continue // a service stays (to be started again) until removed
		}
		if end, ok := j.finishedAt(); ok && end.Before(cutoff) {
			m.mu.Lock()
			m.forgetLocked(j)
			m.mu.Unlock()
			n++
		}
	}
	// Forget the removed jobs in recent (by this sweep or the remove op).
	m.mu.Lock()
	kept := m.recent[:0]
	m.recentN, m.recentBytes, m.recentHead = 0, 0, 0
	for _, f := range m.recent {
		if f.j != nil && m.jobs[f.j.id] == f.j {
			kept = append(kept, f)
			m.recentN++
			m.recentBytes += f.j.acct.finBytes
		}
	}
	clear(m.recent[len(kept):])
	m.recent = kept
	m.mu.Unlock()
	if n > 0 {
		m.log.Debug("retention sweep", "removed", n)
		m.changed()
	}
	return n
}

// finished is an entry of Manager.recent: a finished one-shot job and its
// place in the finish order (kept when the job is removed, to keep the
// order searchable).
type finished struct {
	finN uint64
	j    *Job // nil once removed
}

// forgetRecentLocked empties j's entry in recent (found by its finN), so
// that a removed job's output is not held until the next sweep. m.mu must
// be held.
func (m *Manager) forgetRecentLocked(j *Job) {
	if j.acct.finN == 0 {
		return
	}
	if i, ok := slices.BinarySearchFunc(m.recent, j.acct.finN, func(f finished, n uint64) int {
		return cmp.Compare(f.finN, n)
	}); ok && m.recent[i].j == j {
		m.recent[i].j = nil
		m.recentN--
		m.recentBytes -= j.acct.finBytes
	}
}

// RetainedBytes sums the memory held by every job's ring buffer (output
// and its encoded events, plus a small cost per chunk: see ring).
func (m *Manager) RetainedBytes() int64 {
	var n int64
	for _, j := range m.snapshotOf(func() map[string]*Job { return m.jobs }) {
		j.mu.Lock()
		n += int64(j.out.ring.cost)
		j.mu.Unlock()
	}
	return n
}

// finishedCostLocked is what a finished one-shot job holds besides its
// output ring and its fixed-size structures (those are bounded by
// MaxFinished), in bytes: its argv, shell, cwd, labels and session id,
// its error message, and its retained events other than output. It is
// charged with its output to MaxFinishedOutput: a job spawned with 256 KiB
// of argv costs that much whether it printed anything or not. j.mu must
// be held (or j not yet visible).
func (j *Job) finishedCostLocked() int64 {
	const strHdr = 16   // a string header (a slice element, a map key or value)
	const mapEntry = 16 // a map entry's share of its buckets, roughly
	const evHdr = 96    // an event's fixed fields
	n := len(j.spec.Name) + len(j.spec.Shell) + len(j.spec.Cwd) + len(j.spec.SessionID) + len(j.errMsg) + len(j.notify.status)
	for _, a := range j.spec.Argv {
		n += strHdr + len(a)
	}
	for k, v := range j.spec.Labels {
		n += 2*strHdr + mapEntry + len(k) + len(v)
	}
	for k, v := range j.spec.Env { // (none once compacted)
		n += 2*strHdr + mapEntry + len(k) + len(v)
	}
	for _, ev := range []*protocol.Event{j.evs.started, j.evs.exit} {
		if ev != nil {
			n += evHdr + len(ev.Payload)
		}
	}
	if j.evs.exit == nil { // (the terminal event, which quotes the error, is emitted right after)
		n += evHdr + 64 + len(j.errMsg)
	}
	for _, ev := range j.evs.extra {
		n += evHdr + len(ev.Payload)
	}
	return int64(n)
}
