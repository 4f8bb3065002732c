package lifecycle

import (
	"fmt"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// An Effect is something the driver carries out after a Step, in order.
type Effect interface{ effect() }

// Signal sends Sig to the run's group (or cgroup, or session): only while
// it is known to be the job's (the driver checks LeaderExited and
// GroupGone as it does so).
type Signal struct{ Sig Sig }

// Sig names the signals the lifecycle sends (the core imports no
// syscall).
type Sig string

// The signals.
const (
	SigTerm Sig = "SIGTERM"
	SigKill Sig = "SIGKILL"
	SigCont Sig = "SIGCONT"
	SigHup  Sig = "SIGHUP"
)

// ArmGrace starts the grace period of a kill: GraceOver (after HangupDue
// for a terminal job) comes unless the run ends first.
type ArmGrace struct{}

// Escalate ends a grace period being waited out at once (its SIGKILL is
// sent by the Signal effect next to it).
type Escalate struct{}

// CountCleanupKill counts, once per run, that SIGKILL was needed.
type CountCleanupKill struct{}

// Journal asks for a journal write (the job's pending end must survive a
// crash).
type Journal struct{}

// KillPending carries out the kill that came while Starting: the driver
// hands Step a Kill of Reason once it has let go of the start.
type KillPending struct{ Reason protocol.Reason }

// Finish finalizes the job: its terminal event, done closed. ClearExit:
// no run's exit status is its fate (a service stopped between runs).
type Finish struct{ ClearExit bool }

// ScheduleRestart arms the restart delay (RestartDue after Delay) and
// records the run's end in the service's history as restarted.
type ScheduleRestart struct{ Delay time.Duration }

func (Signal) effect()           {}
func (ArmGrace) effect()         {}
func (Escalate) effect()         {}
func (CountCleanupKill) effect() {}
func (Journal) effect()          {}
func (KillPending) effect()      {}
func (Finish) effect()           {}
func (ScheduleRestart) effect()  {}

// IllegalError says an event cannot happen in the state it came in.
type IllegalError struct {
	State State
	Event Event
}

func (e *IllegalError) Error() string {
	return fmt.Sprintf("lifecycle: %T in state %s", e.Event, e.State)
}

// Step applies ev to l: it returns what is known afterwards and the
// effects to carry out, in order. An event that cannot happen in l's
// state, or that would make a move the state machine does not allow
// (CanMove), is an *IllegalError (l comes back unchanged, with no
// effects).
func Step(l Life, ev Event) (Life, []Effect, error) {
	next, effs, err := step(l, ev)
	if err == nil && next.State != l.State && !CanMove(l.State, next.State) {
		return l, nil, &IllegalError{l.State, ev}
	}
	if err != nil {
		return l, nil, err
	}
	return next, effs, nil
}

func step(l Life, ev Event) (Life, []Effect, error) {
	switch e := ev.(type) {
	case Kill:
		return kill(l, e)
	case Dequeued:
		if l.State != Queued {
			return l, nil, &IllegalError{l.State, ev}
		}
		l.State = Starting
		return l, nil, nil
	case Started:
		if l.State != Starting {
			return l, nil, &IllegalError{l.State, ev}
		}
		l.State = Running
		if l.PendingKill != "" {
			r := l.PendingKill
			l.PendingKill = ""
			return l, []Effect{KillPending{r}}, nil
		}
		return l, nil, nil
	case GraceOver:
		if !l.Killing || l.State == Exited || l.State == Restarting {
			return l, nil, nil // (the run ended meanwhile)
		}
		l.Escalated = true
		effs := []Effect{Signal{SigKill}}
		if !l.CleanupKilled {
			l.CleanupKilled = true
			effs = append(effs, CountCleanupKill{})
		}
		return l, effs, nil
	case HangupDue:
		if !l.Killing || l.Escalated || l.State == Exited || l.State == Restarting {
			return l, nil, nil
		}
		return l, []Effect{Signal{SigHup}, Signal{SigCont}}, nil
	case LeaderExited:
		if l.State != Running && l.State != Exiting {
			return l, nil, &IllegalError{l.State, ev}
		}
		l.LeaderExited = true
		return l, nil, nil
	case GroupOutlived:
		if !l.LeaderExited {
			return l, nil, &IllegalError{l.State, ev}
		}
		effs := []Effect{Signal{SigKill}}
		if !l.CleanupKilled {
			l.CleanupKilled = true
			effs = append(effs, CountCleanupKill{})
		}
		return l, effs, nil
	case GroupGone:
		l.GroupGone = true
		return l, nil, nil
	case RunEnded:
		return runEnded(l, e)
	case RestartDue:
		if l.State != Restarting {
			return l, nil, nil // (stopped, or started by hand, meanwhile)
		}
		return newRun(l), nil, nil
	case Drained:
		if l.State != Restarting {
			return l, nil, &IllegalError{l.State, ev}
		}
		l.State, l.EndReason, l.Reason = Exited, protocol.ReasonShutdown, protocol.ReasonShutdown
		return l, []Effect{Finish{}}, nil
	case NextRun:
		if !l.Service || (l.State != Restarting && l.State != Exited) {
			return l, nil, &IllegalError{l.State, ev}
		}
		return newRun(Life{}), nil, nil
	}
	return l, nil, fmt.Errorf("lifecycle: unknown event %T", ev)
}

// newRun is l as a service's next run starts.
func newRun(l Life) Life {
	return Life{State: Starting, Service: true, EndReason: l.EndReason}
}

// kill is Step of a Kill.
func kill(l Life, e Kill) (Life, []Effect, error) {
	var effs []Effect
	if l.Service && EndsSupervision(e.Reason) && l.EndReason == "" {
		l.EndReason = e.Reason
		effs = append(effs, Journal{}) // (a crash now must not resume it)
	}
	switch l.State {
	case Restarting:
		if !EndsSupervision(e.Reason) {
			return l, effs, nil // a timeout or watchdog of a run that is over
		}
		// Between runs: nothing to signal; supervision ends here (the
		// last run's end is in the history, not in this fate).
		l.State, l.Reason = Exited, l.EndReason
		return l, append(effs, Finish{ClearExit: true}), nil
	case Exited:
		return l, effs, nil
	case Queued:
		// No process: it ends here, never started.
		l.State, l.Reason = Exited, e.Reason
		return l, append(effs, Finish{}), nil
	case Starting:
		// The process does not exist yet: it is killed once it does.
		if l.PendingKill == "" {
			l.PendingKill = e.Reason
		}
		return l, effs, nil
	}
	if l.Killing {
		if e.Hard {
			// Sent here too, not only when the grace period ends: a
			// supervisor whose shutdown gave up waiting exits right
			// after asking for this.
			l.Escalated = true
			effs = append(effs, Escalate{})
			if !l.LeaderExited || !l.GroupGone {
				effs = append(effs, Signal{SigKill})
			}
		}
		return l, effs, nil
	}
	l.Killing = true
	if !l.LeaderExited {
		// (after the leader exited, its end decides the reason)
		l.Reason, l.State = e.Reason, Exiting
	}
	if e.Hard {
		l.Escalated = true
		return l, append(effs, Escalate{}, Signal{SigKill}), nil
	}
	// (a stopped process acts on SIGTERM once continued)
	return l, append(effs, Signal{SigTerm}, Signal{SigCont}, ArmGrace{}), nil
}

// runEnded is Step of a RunEnded.
func runEnded(l Life, e RunEnded) (Life, []Effect, error) {
	if l.State == Exited || l.State == Restarting {
		return l, nil, &IllegalError{l.State, e}
	}
	l.Reason = RunReason(l, e.Signaled, e.SpawnFailed)
	if l.Service && l.EndReason == "" {
		v := e.Verdict
		switch {
		case v.Closing:
			l.EndReason = protocol.ReasonShutdown
		case v.Limited:
			l.Reason = protocol.ReasonRestartLimit
		case v.Restart:
			l.State = Restarting
			l.Killing, l.Escalated, l.PendingKill = false, false, ""
			return l, []Effect{ScheduleRestart{v.Delay}}, nil
		}
	}
	if l.Service && l.EndReason != "" {
		l.Reason = l.EndReason
	}
	l.State = Exited
	return l, []Effect{Finish{}}, nil
}
