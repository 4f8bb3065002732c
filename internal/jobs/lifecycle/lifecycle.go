// Package lifecycle is the pure core of a job's life: Step takes what
// is known of a job (Life) and an event (a kill asked for, the process
// started, its leader exited, its run ended, ...) and returns what is
// known afterwards and the effects to carry out (signal the group, arm the
// grace period, finish the job, ...). It does no I/O and reads no clock:
// the job engine (internal/jobs) drives it under the job's lock and
// carries out the effects (signals, timers, events, journal writes).
//
// It decides what happens to the state and why, and (Backoff) a service's
// restart schedule, whose verdict the engine hands RunEnded; it knows
// nothing of processes, pipes or output.
package lifecycle

import (
	"fmt"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// State is a job's lifecycle state. A one-shot job moves forward only:
// Starting, Running, Exiting, Exited. A service goes from a run's end to
// Restarting and back to Starting, and a finished service may be started
// again (Exited to Starting).
type State int

// Job states.
const (
	// Starting: the job is registered; its process is being started.
	Starting State = iota
	// Running: the process started and is being supervised.
	Running
	// Exiting: termination was asked for (a kill or a timeout); the
	// process has not been reaped yet.
	Exiting
	// Exited: the job is finalized: reason, exit status and the last event
	// are recorded.
	Exited
	// Restarting: a service between runs, waiting for its delay.
	Restarting
	// Queued: a one-shot job spawned to wait for a free slot under the
	// job limit; no process yet (Dequeued starts it).
	Queued
)

func (s State) String() string {
	switch s {
	case Starting:
		return "starting"
	case Running:
		return "running"
	case Exiting:
		return "exiting"
	case Exited:
		return "exited"
	case Restarting:
		return "restarting"
	case Queued:
		return "queued"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Wire returns the protocol form of s.
func (s State) Wire() protocol.State { return protocol.State(s.String()) }

// legal lists the allowed moves.
var legal = map[State][]State{
	Starting:   {Running, Exited, Restarting},
	Running:    {Exiting, Exited, Restarting},
	Exiting:    {Exited, Restarting},
	Restarting: {Starting, Exited},
	Exited:     {Starting}, // only a service, by start or restart
	Queued:     {Starting, Exited},
}

// CanMove reports whether from -> to is a legal move.
func CanMove(from, to State) bool {
	for _, s := range legal[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Life is what the lifecycle knows of a job. The zero value is a one-shot
// job Starting.
type Life struct {
	State State
	// Service: the job has a restart policy (it runs again after a run
	// ends, as its policy says).
	Service bool
	// Reason is the termination reason a kill or timeout asked for
	// before the run's leader exited; final once Exited.
	Reason protocol.Reason
	// PendingKill is a kill that came while Starting: it is carried out
	// once the process exists (Started).
	PendingKill protocol.Reason
	// Killing: the current run is being terminated (SIGTERM sent, or
	// SIGKILL); Escalated: SIGKILL was asked for.
	Killing, Escalated bool
	// CleanupKilled: the run needed SIGKILL after its grace period
	// (counted once).
	CleanupKilled bool
	// LeaderExited: the run's process was reaped; GroupGone: its group
	// was seen empty too, so it must never be signalled again (its
	// number may be reused).
	LeaderExited, GroupGone bool
	// EndReason: for a service, what ended supervision (a stop, kill or
	// shutdown), which becomes its final reason.
	EndReason protocol.Reason
}

// EndsSupervision says whether a kill with reason ends a service for good
// (rather than ending one run, which its policy may restart).
func EndsSupervision(r protocol.Reason) bool {
	switch r {
	case protocol.ReasonManualCancel, protocol.ReasonStopped, protocol.ReasonShutdown:
		return true
	}
	return false
}

// An Event is something that happened to the job, handed to Step.
type Event interface{ event() }

// Kill asks for the job's termination with Reason: SIGTERM to its group,
// the grace period, SIGKILL; Hard: SIGKILL at once (or at once now, for a
// kill already waiting out its grace).
type Kill struct {
	Reason protocol.Reason
	Hard   bool
}

// Started: the run's process exists.
type Started struct{}

// Dequeued: a queued job got its slot; its start begins.
type Dequeued struct{}

// GraceOver: the grace period of a kill passed and the run is not over.
type GraceOver struct{}

// HangupDue: a terminal job's kill reached the moment to hang it up
// (SIGHUP, within the grace period), and the run is not over.
type HangupDue struct{}

// LeaderExited: the run's process was reaped.
type LeaderExited struct{}

// GroupOutlived: what the run's leader left in its group is still there
// once its grace period (or a kill's) passed: SIGKILL.
type GroupOutlived struct{}

// GroupGone: the run's process group (or cgroup, or terminal session)
// was seen empty.
type GroupGone struct{}

// RunReason is the reason a run's end gets: the one a kill or timeout
// asked for, else spawn-error, signal or exit as it ended.
func RunReason(l Life, signaled, spawnFailed bool) protocol.Reason {
	switch {
	case spawnFailed:
		return protocol.ReasonSpawnError
	case l.Reason != "":
		return l.Reason
	case signaled:
		return protocol.ReasonSignal
	}
	return protocol.ReasonExit
}

// RunEnded: the run is over (its leader reaped and its group cleared, or
// its process never started: SpawnFailed); Signaled says a signal ended
// the leader. For a service, Verdict is what its restart policy makes of
// the end (ignored when something ended supervision already).
type RunEnded struct {
	Signaled    bool
	SpawnFailed bool
	Verdict     Verdict
}

// Verdict is a service's restart policy's answer to a run's end.
type Verdict struct {
	// Restart: run it again after Delay.
	Restart bool
	Delay   time.Duration
	// Limited: the policy would restart it, but the run ends within its
	// window reached the limit: supervision ends (restart-limit).
	Limited bool
	// Closing: the supervisor is going away (a drain) and would restart
	// it: supervision ends as a shutdown does, so that the next
	// supervisor resumes it.
	Closing bool
}

// RestartDue: a service's restart delay passed; its next run starts.
type RestartDue struct{}

// Drained: the supervisor is going away (a drain) as a service's restart
// delay passed: supervision ends as a shutdown does (the next supervisor
// resumes it), the last run's end kept as its fate.
type Drained struct{}

// NextRun: a service is started again by hand (the start or restart op,
// or a resume), waiting to restart or finished: its next run starts now,
// with nothing of the last one's fate.
type NextRun struct{}

func (Kill) event()          {}
func (Started) event()       {}
func (Dequeued) event()      {}
func (GraceOver) event()     {}
func (HangupDue) event()     {}
func (LeaderExited) event()  {}
func (GroupOutlived) event() {}
func (GroupGone) event()     {}
func (RunEnded) event()      {}
func (RestartDue) event()    {}
func (NextRun) event()       {}
func (Drained) event()       {}
