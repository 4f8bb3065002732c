package jobs

import (
	"os"
	"strconv"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// jobUsage is a job's last resource sample. Guarded by Job.mu.
type jobUsage struct {
	// lastCPU and lastSampled are the previous resource sample (for CPU%),
	// lastUsage what it answered (reused while fresh: see usageFresh).
	lastCPU     float64
	lastSampled time.Time
	lastUsage   protocol.Usage
}

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
// (own plus reaped children's): the usage of jobs without a cgroup. Its
// cost follows every process on the machine.
func sampleUsage(groups, sessions map[int]bool) map[int]*usageAcc {
	out := map[int]*usageAcc{}
	if len(groups) == 0 && len(sessions) == 0 {
		return out
	}
	proc.EachEntry(func(p *proc.Entry) bool {
		// f[11..14] = utime, stime, cutime, cstime (fields 14..17); f[21] = rss (24)
		if len(p.F) < 22 || p.Zombie() {
			return true
		}
		key, ok := p.ScopeKey(groups, sessions)
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
			v, _ := strconv.ParseInt(p.F[k], 10, 64)
			a.cpu += float64(v) / clockTicks
		}
		rss, _ := strconv.ParseInt(p.F[21], 10, 64)
		a.rss += rss * pageSize
		return true
	})
	return out
}

// usageFresh is how long a job's usage sample is reused: status and
// list of many jobs, asked for again and again (execctl top, a gateway
// polling), read each job's cgroup or the process table at most once per
// interval, not at every request (1,000 jobs cost ~60 ms of reads). A
// sample's SampledAt says when it was taken.
const usageFresh = time.Second

// attachUsage fills Usage for the running jobs among infos. A job with a
// cgroup is read from its cgroup's files (its own cost, whatever else
// runs; and it counts what left the job's process group); the others
// from one scan of the process table for all of them. A sample younger
// than usageFresh is reused. CPU percent is measured since the previous
// sample of the same job, or since it started.
func (m *Manager) attachUsage(infos []protocol.JobInfo) {
	jobs := make([]*Job, len(infos))
	accs := make([]*usageAcc, len(infos))
	groups, sessions := map[int]bool{}, map[int]bool{}
	now := m.now()
	for i := range infos {
		in := &infos[i]
		if !sampled(*in) {
			continue
		}
		j, err := m.Get(in.JobID)
		if err == nil {
			if u := j.freshUsage(now); u != nil {
				in.Usage = u
				continue
			}
			jobs[i] = j
			if a, ok := j.cgroupUsage(); ok {
				accs[i] = a
				continue
			}
		}
		if in.Pty {
			sessions[in.Pgid] = true
		} else {
			groups[in.Pgid] = true
		}
	}
	scanned := sampleUsage(groups, sessions)
	for i := range infos {
		in := &infos[i]
		if !sampled(*in) || in.Usage != nil {
			continue
		}
		a := accs[i]
		if a == nil {
			if a = scanned[in.Pgid]; a == nil {
				a = &usageAcc{}
			}
		}
		u := &protocol.Usage{Processes: a.procs, RSSBytes: a.rss, CPUSeconds: a.cpu, SampledAt: now.UnixMilli()}
		if j := jobs[i]; j != nil {
			j.mu.Lock()
			prevCPU, prevAt := j.usage.lastCPU, j.usage.lastSampled
			if prevAt.IsZero() {
				prevCPU, prevAt = 0, j.startedAt
			}
			if dt := now.Sub(prevAt).Seconds(); dt > 0.001 {
				u.CPUPercent = max(0, (a.cpu-prevCPU)/dt*100)
			}
			j.usage.lastCPU, j.usage.lastSampled, j.usage.lastUsage = a.cpu, now, *u
			j.mu.Unlock()
		}
		in.Usage = u
	}
}

// freshUsage returns a copy of j's last usage sample if it is younger
// than usageFresh (nil: sample again).
func (j *Job) freshUsage(now time.Time) *protocol.Usage {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.usage.lastSampled.IsZero() || now.Sub(j.usage.lastSampled) >= usageFresh || now.Before(j.usage.lastSampled) {
		return nil
	}
	u := j.usage.lastUsage
	return &u
}

// sampled reports whether a job in this state gets usage.
func sampled(in protocol.JobInfo) bool {
	return (in.State == protocol.StateRunning || in.State == protocol.StateExiting) && in.Pgid > 1
}

// cgroupUsage reads the current run's usage from its cgroup: processes
// and CPU from the cgroup, memory too where its memory controller is
// enabled, else the RSS of its processes. False when the job has no
// cgroup, or it cannot be read (the process-group scan then).
func (j *Job) cgroupUsage() (*usageAcc, bool) {
	cg := j.liveCgroup()
	if cg == nil {
		return nil, false
	}
	u, err := cg.Usage()
	var a *usageAcc
	if err == nil {
		a = &usageAcc{procs: len(u.Pids), rss: u.Memory, cpu: u.CPU.Seconds()}
		if !u.HasMemory {
			a.procs, a.rss = pidsRSS(u.Pids)
		}
	}
	if j.liveCgroup() != cg {
		// The run ended while its cgroup was read: the cgroup may be
		// gone, or serve another job already.
		return &usageAcc{}, true
	}
	if err != nil {
		j.m.log.Debug("job usage from its cgroup", "job", j.id, "err", err)
		return nil, false
	}
	return a, true
}

// liveCgroup returns the cgroup of the job's current run while it runs
// (nil without one).
func (j *Job) liveCgroup() *cgroups.Cgroup {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.life.State != Running && j.life.State != Exiting {
		return nil
	}
	return j.run.cg
}

// pidsRSS returns how many of pids are live processes, and the sum of
// their RSS.
func pidsRSS(pids []int) (n int, rss int64) {
	buf := make([]byte, proc.StatBufSize)
	for _, pid := range pids {
		b, err := proc.ReadStat(strconv.Itoa(pid), buf)
		if err != nil {
			continue // (ended)
		}
		f, ok := proc.StatFields(b)
		if !ok || len(f) < 22 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		pages, _ := strconv.ParseInt(f[21], 10, 64)
		n++
		rss += pages * pageSize
	}
	return n, rss
}

// InfoWithUsage returns the job's info with its current resource usage.
func (m *Manager) InfoWithUsage(j *Job) protocol.JobInfo {
	infos := []protocol.JobInfo{j.Info()}
	m.attachUsage(infos)
	return infos[0]
}
