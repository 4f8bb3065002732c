package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"golang.org/x/sys/unix"
)

// The variables of a job's mark (see WithMark): its job id, and the mark
// of the supervisor's state directory.
const (
	EnvJobID   = "EXEC_SUPERVISOR_JOB_ID"
	EnvStateID = "EXEC_SUPERVISOR_STATE_ID"
)

// MarkedProcess is a live process found carrying a state's mark.
type MarkedProcess struct {
	Pid, Pgid, Sid int
	StartTicks     uint64
	// JobID is the job whose environment it was started with.
	JobID string
}

// maxMarkedEnviron bounds the environment read of one process (the
// kernel's own bound on argv plus environment is about this).
const maxMarkedEnviron = 8 << 20

// FindMarked scans the process table for the processes that carry the
// mark of stateID in the environment they were started with
// (/proc/<pid>/environ: the first value of each variable, as getenv takes
// it), that run with exactly this process's user ids (real, effective,
// saved and filesystem: a set-user-id program started with a forged mark,
// or anything of another user, is never taken), and that are in this
// process's cgroup or below it, or below one of within (cgroup v2 paths
// as /proc/<pid>/cgroup gives them; see newCgroupScope for a process in the
// root): what a job moved elsewhere (systemd-run, a service manager that
// imported its environment, atd) is not taken. This process, its
// ancestors and zombies are left out. An error says the scan could not be
// made.
//
// Reading a process's environment takes its memory map's lock, as ps
// does to read command lines: a process stuck in the kernel with that
// lock held (a page fault on a hung network filesystem) holds the scan
// up until it is released.
func FindMarked(stateID string, within ...string) ([]MarkedProcess, error) {
	if stateID == "" {
		return nil, nil
	}
	ids, err := userIDs("self")
	if err != nil {
		return nil, fmt.Errorf("read this process's user ids: %w", err)
	}
	scope, err := newCgroupScope(within)
	if err != nil {
		return nil, fmt.Errorf("read this process's cgroup: %w", err)
	}
	skip := map[int]bool{}
	for _, pid := range ancestors() { // (this process first)
		skip[pid] = true
	}
	var out []MarkedProcess
	EachEntry(func(p *Entry) bool {
		if skip[p.Pid] || p.Zombie() || len(p.F) < 20 {
			return true
		}
		ticks, err := strconv.ParseUint(p.F[19], 10, 64)
		if err != nil {
			return true
		}
		pid := strconv.Itoa(p.Pid)
		if u, err := userIDs(pid); err != nil || u != ids || !scope.holds(pid) {
			return true
		}
		job, ok := ReadMark(pid, stateID)
		if !ok {
			return true
		}
		out = append(out, MarkedProcess{Pid: p.Pid, Pgid: p.Pgid, Sid: p.Sid, StartTicks: ticks, JobID: job})
		return true
	})
	return out, nil
}

// cgroupScope is where FindMarked takes processes: in or below one of
// the cgroup v2 paths under, or with exactly the cgroup file exact.
type cgroupScope struct {
	under []string
	exact string
}

// newCgroupScope is this process's cgroup and what is below it, and below
// extra. A process in the root of the cgroup v2 hierarchy (or without
// one) holds in its scope only processes in exactly its cgroups (v1 ones
// included): below the root is the whole machine.
func newCgroupScope(extra []string) (cgroupScope, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return cgroupScope{}, err
	}
	s := cgroupScope{under: extra}
	if own, ok := cgroups.UnifiedPath(b); ok && own != "/" && own != "" {
		s.under = append(s.under, own)
	} else {
		s.exact = string(b)
	}
	return s, nil
}

// holds reports whether process pid is within the scope.
func (s cgroupScope) holds(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		return false
	}
	if s.exact != "" && string(b) == s.exact {
		return true
	}
	cg, ok := cgroups.UnifiedPath(b)
	if !ok {
		return false
	}
	for _, u := range s.under {
		if u == "" || u == "/" {
			continue
		}
		if cg == u || strings.HasPrefix(cg, strings.TrimSuffix(u, "/")+"/") {
			return true
		}
	}
	return false
}

// userIDs returns the four user ids of /proc/<pid>/status's Uid line.
func userIDs(pid string) (string, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(v); len(f) == 4 {
				return strings.Join(f, " "), nil
			}
		}
	}
	return "", errors.New("no Uid line")
}

// ReadMark returns the job id of pid's mark when its environment carries
// the mark of stateID.
func ReadMark(pid, stateID string) (string, bool) {
	f, err := os.Open("/proc/" + pid + "/environ")
	if err != nil {
		return "", false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMarkedEnviron+1))
	if err != nil || len(b) > maxMarkedEnviron {
		return "", false
	}
	return parseMark(b, stateID)
}

// parseMark reads a NUL-separated environment: the job id of the mark of
// stateID, if it carries that mark (the first value of each variable
// counts, as for getenv).
func parseMark(env []byte, stateID string) (string, bool) {
	var job, state string
	var haveJob, haveState bool
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		switch {
		case !haveJob && string(k) == EnvJobID:
			job, haveJob = string(v), true
		case !haveState && string(k) == EnvStateID:
			state, haveState = string(v), true
		}
	}
	if !haveJob || !haveState || state != stateID || job == "" || len(job) > 256 {
		return "", false
	}
	return job, true
}

// TerminateMarked ends the processes FindMarked found for stateID the way
// every job ends: SIGTERM (and SIGCONT) to the process group of each that
// leads one (which it then owns, until the group is seen empty: then it
// is never signalled again, its number may be anyone's) and to each of the
// others, up to grace for all of them and those groups to end, then
// SIGKILL to what is left. A process is signalled only while it is still
// the one found: same start time, user ids and mark, checked after a pidfd
// was opened on it, through which it is signalled (where pidfds cannot be
// opened, it is signalled by pid right after that check). Neither this
// process's group nor any of its ancestors' is ever signalled. It returns
// the processes it signalled, whether SIGKILL was needed, and whether
// something was still running 5 s after it.
func TerminateMarked(ps []MarkedProcess, stateID string, grace time.Duration) (ended []MarkedProcess, killed, left bool) {
	ids, err := userIDs("self")
	if err != nil {
		return nil, false, len(ps) > 0
	}
	ours := map[int]bool{syscall.Getpgrp(): true, 0: true, 1: true}
	for _, pid := range ancestors() {
		if pg, _, err := Group(pid); err == nil {
			ours[pg] = true
		}
	}
	type target struct {
		MarkedProcess
		pidfd int // -1: none (signalled by pid)
	}
	var live []target
	same := func(p MarkedProcess) bool {
		pid := strconv.Itoa(p.Pid)
		ticks, err := StartTicks(p.Pid)
		if err != nil || ticks != p.StartTicks {
			return false
		}
		u, err := userIDs(pid)
		job, ok := ReadMark(pid, stateID)
		return err == nil && u == ids && ok && job == p.JobID
	}
	for _, p := range ps {
		t := target{MarkedProcess: p, pidfd: -1}
		fd, err := unix.PidfdOpen(p.Pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			continue // gone
		} else if err == nil {
			t.pidfd = fd
		}
		if !same(p) {
			if t.pidfd >= 0 {
				unix.Close(t.pidfd)
			}
			continue // gone (its pid may be another's now), or changed
		}
		live = append(live, t)
	}
	defer func() {
		for _, t := range live {
			if t.pidfd >= 0 {
				unix.Close(t.pidfd)
			}
		}
	}()
	if len(live) == 0 {
		return nil, false, false
	}
	running := func(t target) bool {
		if t.pidfd < 0 {
			return Identify(t.Pid, t.StartTicks, BootID()) == Ours
		}
		for {
			fds := []unix.PollFd{{Fd: int32(t.pidfd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, 0)
			if err == syscall.EINTR {
				continue
			}
			return err != nil || n == 0 // (an error: taken as running)
		}
	}
	// Groups led by a found process are signalled whole (once: their
	// members are not signalled again one by one), while they have members.
	groups := map[int]bool{}
	for _, t := range live {
		if t.Pgid == t.Pid && !ours[t.Pgid] {
			groups[t.Pgid] = true
		}
	}
	// liveGroups drops the groups seen empty (one scan of /proc).
	liveGroups := func() {
		alive := map[int]bool{}
		EachEntry(func(p *Entry) bool {
			if groups[p.Pgid] && !p.Zombie() {
				alive[p.Pgid] = true
			}
			return true
		})
		for g := range groups {
			if !alive[g] {
				delete(groups, g)
			}
		}
	}
	signal := func(sig syscall.Signal) {
		liveGroups()
		for g := range groups {
			_ = SignalGroup(g, sig)
		}
		for _, t := range live {
			if !running(t) {
				continue
			}
			if groups[t.Pgid] {
				if pg, _, err := Group(t.Pid); err == nil && pg == t.Pgid {
					continue // (signalled with its group)
				}
			}
			if t.pidfd >= 0 {
				_ = unix.PidfdSendSignal(t.pidfd, sig, nil, 0)
			} else if same(t.MarkedProcess) {
				_ = syscall.Kill(t.Pid, sig)
			}
		}
	}
	anyLeft := func() bool {
		liveGroups()
		return len(groups) > 0 || slices.ContainsFunc(live, running)
	}
	for _, t := range live {
		ended = append(ended, t.MarkedProcess)
	}
	signal(syscall.SIGTERM)
	signal(syscall.SIGCONT) // (a stopped process takes SIGTERM only once continued)
	if WaitGone(anyLeft, grace, nil) {
		return ended, false, false
	}
	signal(syscall.SIGKILL)
	return ended, true, !WaitGone(anyLeft, 5*time.Second, nil)
}

// ancestors returns this process and its ancestors' pids.
func ancestors() []int {
	var out []int
	seen := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !seen[pid]; {
		seen[pid] = true
		out = append(out, pid)
		p, ok := Lookup(pid)
		if !ok {
			break
		}
		pid = p.PPid
	}
	return out
}

// Unmarked returns env without the mark's variables.
func Unmarked(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !IsMarkVar(k) {
			out = append(out, kv)
		}
	}
	return out
}

// IsMarkVar says whether k is one of the mark's variables.
func IsMarkVar(k string) bool { return k == EnvJobID || k == EnvStateID }
