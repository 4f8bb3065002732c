package proc

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Liveness is what the process table says about a recorded process.
type Liveness int

// Liveness values.
const (
	// Gone: no process has the pid.
	Gone Liveness = iota
	// Reused: a process has the pid but another start time or boot: not ours.
	Reused
	// Ours: the pid, start time and boot id all match.
	Ours
)

func (l Liveness) String() string {
	switch l {
	case Gone:
		return "gone"
	case Reused:
		return "pid-reused"
	case Ours:
		return "alive"
	}
	return "Liveness(" + strconv.Itoa(int(l)) + ")"
}

// Identify checks whether pid is still the process that had startTicks in
// boot bootID. Zombies count as gone.
func Identify(pid int, startTicks uint64, bootID string) Liveness {
	if pid <= 1 {
		return Gone
	}
	ticks, err := StartTicks(pid)
	if err != nil {
		return Gone
	}
	if p, ok := Lookup(pid); ok && p.Zombie {
		return Gone
	}
	if startTicks == 0 || ticks != startTicks || bootID == "" || bootID != BootID() {
		return Reused
	}
	return Ours
}

// TerminateGroup ends process group pgid (with session, every process
// group of session pgid, as for PTY jobs) the way every job ends: SIGTERM
// (and SIGCONT), up to grace for it to empty, then SIGKILL. It reports whether SIGKILL was
// needed. The caller must know the group is its own.
func TerminateGroup(pgid int, session bool, grace time.Duration) (killed bool, err error) {
	// (never our own group or session, whatever a journal says)
	if sid, _ := unix.Getsid(0); pgid <= 1 || pgid == os.Getpid() || pgid == syscall.Getpgrp() || pgid == sid {
		return false, fmt.Errorf("refusing to terminate process group %d (ours, or not a job's)", pgid)
	}
	signal, alive := func(sig syscall.Signal) error { return SignalGroup(pgid, sig) }, func() bool { return GroupAlive(pgid) }
	if session {
		signal, alive = func(sig syscall.Signal) error { return SignalSession(pgid, sig) }, func() bool { return SessionAlive(pgid) }
	}
	if err := signal(syscall.SIGTERM); err != nil {
		return false, err
	}
	_ = signal(syscall.SIGCONT) // (a stopped process acts on SIGTERM once continued)
	if WaitGone(alive, grace, nil) {
		return false, nil
	}
	if err := signal(syscall.SIGKILL); err != nil {
		return true, err
	}
	if !WaitGone(alive, 5*time.Second, nil) {
		return true, fmt.Errorf("process group %d survived SIGKILL", pgid)
	}
	return true, nil
}

// ProcID identifies a process across pid reuse.
type ProcID struct {
	Pid        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"`
}

// GroupMembers scans the process table once and returns the live members
// of each of the given process groups, and of each of the given sessions
// (keyed by session id; for PTY jobs, whose session may hold several groups).
func GroupMembers(pgids, sessions map[int]bool) map[int][]ProcID {
	out := map[int][]ProcID{}
	if len(pgids) == 0 && len(sessions) == 0 {
		return out
	}
	EachEntry(func(p *Entry) bool {
		if p.Zombie() || len(p.F) < 20 {
			return true
		}
		key, ok := p.ScopeKey(pgids, sessions)
		if !ok {
			return true
		}
		if ticks, err := strconv.ParseUint(p.F[19], 10, 64); err == nil {
			out[key] = append(out[key], ProcID{Pid: p.Pid, StartTicks: ticks})
		}
		return true
	})
	return out
}

// WaitGone waits until alive reports false, for at most d or until stop
// is closed. There is no kernel notification for an empty process group,
// so it checks with a short, growing period.
func WaitGone(alive func() bool, d time.Duration, stop <-chan struct{}) bool {
	deadline := time.Now().Add(d)
	period := time.Millisecond
	for {
		if !alive() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		t := time.NewTimer(min(period, left))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return !alive()
		}
		period = min(period*2, 50*time.Millisecond)
	}
}

// ProvesGroup reports whether any of members is alive, is the same process
// (start time and boot) and is still in group pgid (with session: in
// session pgid). Such a process proves the group (session) has been in use
// without a break since it was recorded, so its number cannot have been
// reused: it is still the recorded owner's (a job's, for the supervisor's
// recovery).
func ProvesGroup(pgid int, session bool, members []ProcID, bootID string) bool {
	for _, p := range members {
		if Identify(p.Pid, p.StartTicks, bootID) != Ours {
			continue
		}
		pr, ok := Lookup(p.Pid)
		if ok && ((!session && pr.Pgid == pgid) || (session && pr.Sid == pgid)) {
			return true
		}
	}
	return false
}

// ScopeAlive reports whether process group pgid (with session: session
// pgid) has a live process.
func ScopeAlive(pgid int, session bool) bool {
	if session {
		return SessionAlive(pgid)
	}
	return GroupAlive(pgid)
}
