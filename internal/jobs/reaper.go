package jobs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// EnableSubreaper makes the supervisor a child subreaper: descendants of
// jobs that lose their parent are reparented to it rather than to init,
// stay attributable, and are reaped by the Manager (no zombies), without
// ever taking a job leader's exit status from its waiter. It must not be
// used in a process whose other children are waited for elsewhere.
func (m *Manager) EnableSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return err
	}
	m.reaping = true
	m.wg.Add(1)
	go m.reapLoop()
	return nil
}

// reapLoop reaps orphaned descendants every reapInterval, until stop is
// closed. It does not listen for SIGCHLD: every job's exit raises one,
// and waking a goroutine for each (through os/signal) cost ~2 context
// switches and ~20 µs of CPU per job (measured, /bin/true one at a time)
// to catch the rare orphan. Orphans that were part of a job's group are
// reaped once the job has cleared its group (clearGroup); one that left
// the group earlier stays a zombie for at most reapInterval. (Zombies
// never hold up a job: proc.GroupAlive and a cgroup's populated flag ignore
// them.)
func (m *Manager) reapLoop() {
	defer m.wg.Done()
	t := time.NewTicker(reapInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			m.endLastOrphans(m.stopCtx)
			return
		case <-t.C:
			m.reapOrphans()
		}
	}
}

// reapInterval is the period of the orphan reaping passes.
const reapInterval = time.Second

// orphanSeen is what a pass learnt of a running orphan whose job ran:
// its job (by its mark; "" without one), for that process (start ticks).
type orphanSeen struct {
	ticks uint64
	job   string
}

// endingOrphan is an adopted orphan being ended: SIGTERM was sent, SIGKILL
// follows at deadline.
type endingOrphan struct {
	ticks    uint64
	deadline time.Time
	killed   bool
}

// orphanAct is what a pass does to one child: signal it (its group if it
// leads one), reap it, or both (SIGKILL to a held zombie's group first).
type orphanAct struct {
	pid   int
	ticks uint64
	group bool
	sigs  []syscall.Signal
	reap  bool
	// first: the first signals of an orphan being ended (of job's):
	// counted and logged once sent.
	first bool
	job   string
}

// reapOrphans is one reaper pass over the supervisor's children that are
// not job leaders (those are reaped by their job's waiter): exited ones
// are reaped, and running ones whose job has finished are ended (see
// judgeOrphan). What to do is decided first, reading /proc and the jobs
// (a process's environment may take long to read), without holding up
// job starts; then, under reapMu's write lock (no leader is being started
// meanwhile), each is checked again to be a child of ours that is no
// leader, and the same process (start time), and acted on. Only reaper
// passes reap such children (passMu orders them), so a pid seen a child
// stays that child's until a pass reaps it.
func (m *Manager) reapOrphans() {
	m.passMu.Lock()
	defer m.passMu.Unlock()
	m.pass(true)
}

// reapZombies is a pass that only reaps exited children (a job's, after
// its group is cleared), skipped when a full pass is under way.
func (m *Manager) reapZombies() {
	if !m.passMu.TryLock() {
		return // (that pass reaps them)
	}
	defer m.passMu.Unlock()
	m.pass(false)
}

// pass is a reaper pass (passMu held); full also ends orphans. It
// reports whether it signalled or reaped anything.
func (m *Manager) pass(full bool) (acted bool) {
	self := os.Getpid()
	now := time.Now()
	var acts []orphanAct
	live := map[int]bool{}
	for _, pid := range ownChildren() {
		m.lmu.Lock()
		_, leader := m.leaders[pid]
		m.lmu.Unlock()
		if leader {
			continue
		}
		p, ticks, ok := proc.LookupTicks(pid)
		if !ok || p.PPid != self {
			continue
		}
		live[pid] = true
		e := m.ending[pid]
		if e != nil && e.ticks != ticks {
			delete(m.ending, pid) // (another process now: that one was reaped)
			e = nil
		}
		switch {
		case p.Zombie && e != nil && p.Pgid == pid && proc.GroupAlive(pid):
			// Its group outlives it: it stays unreaped (so the group's
			// number cannot be anyone else's) until the group is ended.
			if !e.killed && now.Before(e.deadline) && !m.hurry {
				continue
			}
			acts = append(acts, orphanAct{pid: pid, ticks: ticks, group: true, sigs: []syscall.Signal{syscall.SIGKILL}, reap: true})
		case p.Zombie:
			acts = append(acts, orphanAct{pid: pid, ticks: ticks, reap: true})
		case full:
			if a, ok := m.judgeOrphan(pid, ticks, p, now); ok {
				acts = append(acts, a)
			}
		}
	}
	if len(acts) > 0 {
		m.reapMu.Lock()
		for _, a := range acts {
			m.lmu.Lock()
			_, leader := m.leaders[a.pid]
			m.lmu.Unlock()
			p, t, ok := proc.LookupTicks(a.pid)
			if leader || !ok || p.PPid != self {
				continue
			}
			if t != a.ticks {
				if a.first {
					delete(m.ending, a.pid)
				}
				continue
			}
			acted = true
			if a.first {
				m.orphansEnded.Add(1)
				m.log.Warn("ownership escape: a process a finished job left outside its group is terminated", "job", a.job, "pid", a.pid, "pgid", p.Pgid, "signal", protocol.SignalName(a.sigs[0]))
			}
			for _, sig := range a.sigs {
				if a.group && p.Pgid == a.pid {
					_ = proc.SignalGroup(a.pid, sig)
				} else {
					_ = syscall.Kill(a.pid, sig)
				}
			}
			if a.reap {
				var ws syscall.WaitStatus
				if got, err := syscall.Wait4(a.pid, &ws, syscall.WNOHANG, nil); err == nil && got == a.pid {
					m.reaped.Add(1)
					delete(m.ending, a.pid)
					delete(m.orphans, a.pid)
				}
			}
		}
		m.reapMu.Unlock()
	}
	if full {
		for pid := range m.orphans {
			if !live[pid] {
				delete(m.orphans, pid)
			}
		}
		for pid := range m.ending {
			if !live[pid] {
				delete(m.ending, pid)
			}
		}
	}
	return acted
}

// judgeOrphan decides what becomes of running child pid, an orphan the
// supervisor adopted as subreaper: a process that left its job's group (a
// setsid, a daemon) and whose parent died. (With cgroups, such a process
// ends with its job's cgroup, unless it also left the cgroup: then it is
// still found here.) With a mark (WithMark), whose job id it carries in
// its environment: if that job has finished, or is
// forgotten, it gets SIGTERM and SIGCONT (to its group if it leads one),
// then SIGKILL once the job's grace period has passed (at once when the
// Manager is stopping in a hurry), as the job's group did. One without a
// mark, or whose job still runs (a service's earlier runs included), is
// left alone, and looked at again at the next pass.
func (m *Manager) judgeOrphan(pid int, ticks uint64, p proc.Process, now time.Time) (orphanAct, bool) {
	act := orphanAct{pid: pid, ticks: ticks, group: p.Pgid == pid}
	if e := m.ending[pid]; e != nil {
		if e.killed || (now.Before(e.deadline) && !m.hurry) {
			return act, false
		}
		e.killed = true
		act.sigs = []syscall.Signal{syscall.SIGKILL}
		return act, true
	}
	if m.mark == "" {
		return act, false
	}
	seen, ok := m.orphans[pid]
	fresh := !ok || seen.ticks != ticks
	if fresh {
		seen = orphanSeen{ticks: ticks}
		seen.job, _ = proc.ReadMark(strconv.Itoa(pid), m.mark)
		if m.orphans == nil {
			m.orphans = map[int]orphanSeen{}
		}
		m.orphans[pid] = seen
	}
	if seen.job == "" {
		return act, false
	}
	grace := m.cfg.Grace
	if j, err := m.Get(seen.job); err == nil {
		if !j.Finished() {
			return act, false // its job runs: it ends with it, or after it
		}
		grace = j.grace
	}
	// Its mark again, now, if it was read at an earlier pass: before, it
	// may have exec'd a program without it (env -u: let go).
	if !fresh {
		if job, _ := proc.ReadMark(strconv.Itoa(pid), m.mark); job != seen.job {
			m.orphans[pid] = orphanSeen{ticks: ticks, job: job}
			return act, false // (judged again at the next pass)
		}
	}
	if m.ending == nil {
		m.ending = map[int]*endingOrphan{}
	}
	e := &endingOrphan{ticks: ticks, deadline: now.Add(grace)}
	m.ending[pid] = e
	act.first, act.job = true, seen.job
	if m.hurry {
		e.killed = true
		act.sigs = []syscall.Signal{syscall.SIGKILL}
	} else {
		act.sigs = []syscall.Signal{syscall.SIGTERM, syscall.SIGCONT}
	}
	return act, true
}

// endLastOrphans, as the Manager stops (its jobs ended), ends what they
// left (judgeOrphan), and what that leaves to the subreaper in turn:
// passes every 20 ms until one finds nothing being ended and does
// nothing. After the grace period (or at once when ctx, the caller of
// Close's, is done) it is in a hurry: SIGKILL to all, and 5 s more at
// most for them to die. What is left then is left running, counted in
// OrphansLeft.
func (m *Manager) endLastOrphans(ctx context.Context) {
	if ctx == nil {
		ctx = context.Background()
	}
	hurryAt := time.Now().Add(m.cfg.Grace)
	var deadline time.Time // (set when in a hurry)
	for {
		m.passMu.Lock()
		if !m.hurry && (ctx.Err() != nil || !time.Now().Before(hurryAt)) {
			m.hurry = true
		}
		if m.hurry && deadline.IsZero() {
			deadline = time.Now().Add(5 * time.Second)
		}
		acted := m.pass(true)
		n := len(m.ending)
		m.passMu.Unlock()
		if n == 0 && !acted {
			return
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			m.orphansLeft.Store(int64(n))
			m.log.Error("orphans of finished jobs still running as the supervisor stops", "count", n)
			return
		}
		var hurry <-chan struct{} // (once in a hurry, ctx no longer wakes the loop)
		if deadline.IsZero() {
			hurry = ctx.Done()
		}
		t := time.NewTimer(20 * time.Millisecond) // (a process's end has no event for us here)
		select {
		case <-t.C:
		case <-hurry:
			t.Stop()
		}
	}
}

// OrphansEnded counts adopted orphans of finished jobs ended by the
// reaper (see judgeOrphan).
func (m *Manager) OrphansEnded() uint64 { return m.orphansEnded.Load() }

// OrphansLeft is how many orphans of finished jobs were still running
// when the stopped Manager gave up on them (see endLastOrphans).
func (m *Manager) OrphansLeft() int { return int(m.orphansLeft.Load()) }

// ownChildren lists the supervisor's child processes: from
// /proc/self/task/*/children (a few small files) where the kernel has
// them, else by scanning the process table.
func ownChildren() []int {
	var out []int
	tasks, err := os.ReadDir("/proc/self/task")
	if err == nil {
		ok := true
		buf := make([]byte, 0, 512)
		for _, t := range tasks {
			b, err := readProcFile("/proc/self/task/"+t.Name()+"/children", buf[:0])
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					if _, serr := os.Stat("/proc/self/task/" + t.Name()); serr == nil {
						ok = false // the kernel lacks CONFIG_PROC_CHILDREN
						break
					}
				}
				continue // the thread ended meanwhile
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					out = append(out, pid)
				}
			}
		}
		if ok {
			return out
		}
	}
	me := os.Getpid()
	out = out[:0]
	proc.EachEntry(func(p *proc.Entry) bool {
		if p.PPid == me {
			out = append(out, p.Pid)
		}
		return true
	})
	return out
}

// readProcFile appends the contents of a small /proc file to buf: three
// system calls where os.ReadFile makes six (this runs after every job).
func readProcFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return buf, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func (m *Manager) addLeader(pid int) {
	m.lmu.Lock()
	m.leaders[pid] = struct{}{}
	m.lmu.Unlock()
}

func (m *Manager) removeLeader(pid int) {
	m.lmu.Lock()
	delete(m.leaders, pid)
	m.lmu.Unlock()
}

// Reaped counts orphaned descendants reaped by the subreaper.
func (m *Manager) Reaped() uint64 { return m.reaped.Load() }
