package jobs

import (
	"bytes"
	"os"
	"strconv"
	"strings"

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
	d, err := os.Open("/proc")
	if err != nil {
		return out
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		// f[0]=state(3) f[2]=pgrp(5) f[3]=session(6) f[11..14]=utime,stime,cutime,cstime(14..17) f[21]=rss(24)
		if len(f) < 22 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		pg, _ := strconv.Atoi(f[2])
		sid, _ := strconv.Atoi(f[3])
		key := 0
		switch {
		case sessions[sid]:
			key = sid
		case groups[pg]:
			key = pg
		default:
			continue
		}
		a := out[key]
		if a == nil {
			a = &usageAcc{}
			out[key] = a
		}
		a.procs++
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(f[k], 10, 64)
			a.cpu += float64(v) / clockTicks
		}
		rss, _ := strconv.ParseInt(f[21], 10, 64)
		a.rss += rss * pageSize
	}
	return out
}

// attachUsage fills Usage for the running jobs among infos (one scan of
// the process table for all of them). CPU percent is measured since the
// previous sample of the same job, or since it started.
func (m *Manager) attachUsage(infos []protocol.JobInfo) {
	groups, sessions := map[int]bool{}, map[int]bool{}
	for _, in := range infos {
		if in.State != protocol.StateExited && in.Pgid > 1 {
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
		if in.State == protocol.StateExited || in.Pgid <= 1 {
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
