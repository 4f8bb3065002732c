package jobs

import (
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// cgroupPath is the current run's cgroup while it runs (a finished run's
// cgroup may already serve another job).
func (j *Job) cgroupPath() string {
	if j.run.cg == nil || j.life.State == Exited || j.life.State == Restarting {
		return ""
	}
	return j.run.cg.Path
}

func (j *Job) ownership() string {
	switch {
	case j.run.pid == 0:
		return ""
	case j.run.cg != nil:
		return "cgroup"
	}
	return "pgid"
}

// detectEscapes logs (and reports) processes of the job's cgroup that left
// its process group or session: they are still the job's and are ended
// with it, but a program doing this is worth knowing about.
func (j *Job) detectEscapes(runDone <-chan struct{}) {
	j.mu.Lock()
	cg, pgid, isPTY := j.run.cg, j.run.pgid, j.in.isPTY
	gone := over(runDone)
	j.mu.Unlock()
	if cg == nil || gone {
		return
	}
	var escaped []int
	for _, pid := range cg.Procs() {
		p, ok := proc.Lookup(pid)
		if !ok {
			continue
		}
		if (isPTY && p.Sid != pgid) || (!isPTY && p.Pgid != pgid) {
			escaped = append(escaped, pid)
		}
	}
	if len(escaped) == 0 {
		return
	}
	j.mu.Lock()
	if over(runDone) {
		j.mu.Unlock()
		return
	}
	first := !j.run.escaped
	j.run.escaped = true
	if first && j.life.State != Exited {
		j.keepExtraLocked(j.emitLocked(protocol.KindOwnershipEscape, protocol.OwnershipEscapePayload{Pids: escaped}))
	}
	strict := j.spec.StrictOwnership && !j.life.LeaderExited
	j.mu.Unlock()
	if !first {
		return
	}
	j.m.log.Warn("ownership escape: processes left the job's process group; its cgroup still holds them and they end with the job",
		"job", j.id, "pgid", pgid, "pids", escaped, "strict", j.spec.StrictOwnership)
	if h := j.m.hooks.OwnershipEscape; h != nil {
		h()
	}
	if strict {
		_, _ = j.kill(runDone, protocol.ReasonOwnershipEscape, 0)
	}
}

// watchEscapes has the escape watcher check the run (cgroup jobs only)
// every escapeCheckPeriod until it ends.
func (m *Manager) watchEscapes(j *Job, runDone <-chan struct{}) {
	m.emu.Lock()
	m.watched[j] = runDone
	m.emu.Unlock()
}

// escapeWatcher looks for escaped processes of every running cgroup job,
// once per escapeCheckPeriod (one goroutine for all jobs).
func (m *Manager) escapeWatcher() {
	defer m.wg.Done()
	t := time.NewTicker(escapeCheckPeriod)
	defer t.Stop()
	type run struct {
		j    *Job
		done <-chan struct{}
	}
	var runs []run
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		runs = runs[:0]
		m.emu.Lock()
		for j, done := range m.watched {
			if over(done) {
				delete(m.watched, j)
				continue
			}
			runs = append(runs, run{j, done})
		}
		m.emu.Unlock()
		for _, r := range runs {
			r.j.detectEscapes(r.done)
		}
	}
}

// escapeCheckPeriod is how often running cgroup jobs are checked for
// processes outside their group or session.
const escapeCheckPeriod = time.Second
