package jobs

import (
	"os"
	"strconv"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on every
// Linux architecture Go supports).
const clockTicks = 100

var pageSize = int64(os.Getpagesize())

type usageAcc struct {
	procs int
	rss   int64 // bytes
	cpu   float64
}

// sampleUsage scans the process table once and adds up, per process group
// (and per session, for PTY jobs), the live processes' RSS and CPU time
// (own plus reaped children's).
func sampleUsage(groups, sessions map[int]bool) map[int]*usageAcc {
	out := map[int]*usageAcc{}
	if len(groups) == 0 && len(sessions) == 0 {
		return out
	}
	eachProc(func(p *procEntry) bool {
		// f[11..14] = utime, stime, cutime, cstime (fields 14..17); f[21] = rss (24)
		if len(p.f) < 22 || p.zombie() {
			return true
		}
		key, ok := p.scopeKey(groups, sessions)
		if !ok {
			return true
		}
		a := out[key]
		if a == nil {
			a = &usageAcc{}
			out[key] = a
		}
		a.procs++
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(p.f[k], 10, 64)
			a.cpu += float64(v) / clockTicks
		}
		rss, _ := strconv.ParseInt(p.f[21], 10, 64)
		a.rss += rss * pageSize
		return true
	})
	return out
}

// attachUsage fills Usage for the running jobs among infos (one scan of
// the process table for all of them). CPU percent is measured since the
// previous sample of the same job, or since it started.
func (m *Manager) attachUsage(infos []protocol.JobInfo) {
	groups, sessions := map[int]bool{}, map[int]bool{}
	for _, in := range infos {
		if (in.State == protocol.StateRunning || in.State == protocol.StateExiting) && in.Pgid > 1 {
			if in.Pty {
				sessions[in.Pgid] = true
			} else {
				groups[in.Pgid] = true
			}
		}
	}
	acc := sampleUsage(groups, sessions)
	now := m.now()
	for i := range infos {
		in := &infos[i]
		if (in.State != protocol.StateRunning && in.State != protocol.StateExiting) || in.Pgid <= 1 {
			continue
		}
		a := acc[in.Pgid]
		if a == nil {
			a = &usageAcc{}
		}
		u := &protocol.Usage{Processes: a.procs, RSSBytes: a.rss, CPUSeconds: a.cpu, SampledAt: now.UnixMilli()}
		j, err := m.Get(in.JobID)
		if err == nil {
			j.mu.Lock()
			prevCPU, prevAt := j.lastCPU, j.lastSampled
			if prevAt.IsZero() {
				prevCPU, prevAt = 0, j.startedAt
			}
			if dt := now.Sub(prevAt).Seconds(); dt > 0.001 {
				u.CPUPercent = max(0, (a.cpu-prevCPU)/dt*100)
			}
			j.lastCPU, j.lastSampled = a.cpu, now
			j.mu.Unlock()
		}
		in.Usage = u
	}
}

// InfoWithUsage returns the job's info with its current resource usage.
func (m *Manager) InfoWithUsage(j *Job) protocol.JobInfo {
	infos := []protocol.JobInfo{j.Info()}
	m.attachUsage(infos)
	return infos[0]
}
