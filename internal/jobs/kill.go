package jobs

import (
	"fmt"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Kill requests termination with reason. sig 0 or SIGTERM takes the
// termination path: SIGTERM to the group, grace, SIGKILL to the group.
// SIGKILL kills the group at once. Repeated kills are idempotent (a SIGKILL
// escalates a pending grace). It reports whether the job had already finished.
func (j *Job) Kill(reason Reason, sig syscall.Signal) (alreadyFinished bool, err error) {
	return j.kill(nil, reason, sig)
}

// kill is Kill restricted to the run whose runDone is given (nil: any).
// What it does is the lifecycle core's decision (lifecycle.Kill); the
// effects are carried out here.
func (j *Job) kill(runDone <-chan struct{}, reason Reason, sig syscall.Signal) (alreadyFinished bool, err error) {
	j.mu.Lock()
	if runDone != nil && over(runDone) {
		j.mu.Unlock()
		return false, nil
	}
	before := j.life
	effs := j.stepLocked(lifecycle.Kill{Reason: reason, Hard: sig == sigKill})
	if !before.Killing && j.life.Killing {
		j.run.killDeadline = j.m.now().Add(j.grace)
		first := syscall.SIGTERM
		if sig == sigKill {
			first = sigKill
		}
		j.m.log.Info("job kill", "job", j.id, "reason", string(reason), "signal", protocol.SignalName(first), "grace", j.grace)
	}
	after := j.applyLocked(effs)
	j.mu.Unlock()
	after()
	if before.State == Restarting && j.Finished() {
		j.m.log.Info("service stopped while waiting to restart", "job", j.id, "reason", string(reason))
	}
	return before.State == Exited, nil
}

// applyLocked carries out the lifecycle core's effects (j.mu held) and
// returns what must be done once j.mu is released (the kill that came
// while starting). A cleanup kill is counted under j.mu, beside the
// SIGKILL: once j.mu is released the job may end and be seen finished,
// and a job seen finished must have been counted.
func (j *Job) applyLocked(effs []lifecycle.Effect) (after func()) {
	var later []func()
	for _, e := range effs {
		switch e := e.(type) {
		case lifecycle.Signal:
			if err := j.signalLocked(signalOf(e.Sig)); err != nil && e.Sig != lifecycle.SigCont {
				j.m.log.Warn("job kill signal", "job", j.id, "err", err)
			}
		case lifecycle.ArmGrace:
			j.m.wg.Add(1)
			go j.escalateAfterGrace(j.runDone, j.run.killNow, j.grace, j.in.isPTY)
		case lifecycle.Escalate:
			j.escalateLocked()
		case lifecycle.Journal:
			j.m.changed()
		case lifecycle.Finish:
			if e.ClearExit {
				j.exitCode, j.signal, j.errMsg = nil, "", ""
			}
			j.finishLocked()
		case lifecycle.CountCleanupKill:
			j.countCleanupKill(j.ownership())
		case lifecycle.KillPending:
			runDone, reason := j.runDone, e.Reason
			later = append(later, func() { _, _ = j.kill(runDone, reason, 0) })
		default:
			j.m.log.Error("job lifecycle: effect not carried out here", "job", j.id, "effect", fmt.Sprintf("%T", e))
		}
	}
	return func() {
		for _, f := range later {
			f()
		}
	}
}

// signalOf is the signal a lifecycle effect names.
func signalOf(s lifecycle.Sig) syscall.Signal {
	switch s {
	case lifecycle.SigKill:
		return syscall.SIGKILL
	case lifecycle.SigCont:
		return syscall.SIGCONT
	case lifecycle.SigHup:
		return syscall.SIGHUP
	}
	return syscall.SIGTERM
}

// exitOf is how a process ended, from its wait status: its exit code, or
// the name of the signal that killed it.
func exitOf(ws syscall.WaitStatus) (code *int, signal string) {
	switch {
	case ws.Exited():
		c := ws.ExitStatus()
		return &c, ""
	case ws.Signaled():
		return nil, protocol.SignalName(ws.Signal())
	}
	return nil, ""
}

// ptyHangupAfter is how long after SIGTERM a PTY job still running is
// hung up (SIGHUP), within its grace (at most half of it).
const ptyHangupAfter = time.Second

func (j *Job) escalateLocked() {
	select {
	case <-j.run.killNow:
	default:
		close(j.run.killNow)
	}
}

// escalateAfterGrace sends SIGKILL to the group once the grace period is
// over, unless the job was finalized first; a PTY job is hung up before
// (see ptyHangupAfter).
func (j *Job) escalateAfterGrace(runDone, killNow <-chan struct{}, grace time.Duration, pty bool) {
	defer j.m.wg.Done()
	// (grace and pty as they were when the kill began, under j.mu: a
	// service's next run may set them anew)
	if pty && grace > 0 {
		// A terminal's job still there shortly after SIGTERM is hung up
		// as a closing terminal does (interactive shells ignore SIGTERM
		// and end on SIGHUP: every kill of sh -i waited out the grace and
		// ended in SIGKILL); programs that handle SIGTERM had their turn.
		hup := min(grace/2, ptyHangupAfter)
		t := time.NewTimer(hup)
		select {
		case <-runDone:
			t.Stop()
			return
		case <-killNow:
			t.Stop()
		case <-t.C:
			j.mu.Lock()
			var after func()
			if !over(runDone) {
				after = j.applyLocked(j.stepLocked(lifecycle.HangupDue{}))
			}
			j.mu.Unlock()
			if after != nil {
				after()
			}
			grace -= hup
		}
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-runDone:
		return
	case <-t.C:
	case <-killNow:
	}
	j.mu.Lock()
	if over(runDone) {
		j.mu.Unlock()
		return
	}
	j.m.log.Info("job kill escalated", "job", j.id, "signal", "SIGKILL")
	after := j.applyLocked(j.stepLocked(lifecycle.GraceOver{}))
	j.mu.Unlock()
	after()
}

func (j *Job) countCleanupKill(mode string) {
	if h := j.m.hooks.CleanupKill; h != nil {
		h(mode)
	}
}

// Signal delivers sig to the job's process group without starting the
// termination path.
func (j *Job) Signal(sig syscall.Signal) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch j.life.State {
	case Exited:
		return errorf(ErrFinished, "job %s has already exited", j.id)
	case Starting, Restarting:
		// No process of this job runs now (the previous run's cgroup may
		// already serve another job).
		return errorf(ErrNotRunning, "job %s has no running process right now (%s)", j.id, j.life.State)
	}
	return j.signalLocked(sig)
}

// signalLocked signals the group while it is known to be ours: before the
// leader is reaped (its pid, and so the pgid, cannot be reused) and, after,
// until the group was seen empty. A job with a cgroup is signalled through
// it, and through its group only until the leader is reaped: the cgroup
// holds everything of the job, while the group number may be free (and
// reused by anyone) although the cgroup is not empty yet.
func (j *Job) signalLocked(sig syscall.Signal) error {
	if j.run.cg != nil {
		// Every member is ours by construction, even one that escaped.
		if sig == syscall.SIGKILL {
			_ = j.run.cg.Kill()
		} else {
			j.run.cg.Signal(sig)
		}
		if j.life.LeaderExited {
			return nil
		}
	}
	if j.life.GroupGone || j.run.pgid <= 1 {
		return nil
	}
	if j.in.isPTY {
		// A terminal session may hold several process groups (job control).
		return proc.SignalSession(j.run.pgid, sig)
	}
	return proc.SignalGroup(j.run.pgid, sig)
}

// scopeAlive reports whether anything of the job still runs: its process
// group, or for a PTY job its whole session.
func (j *Job) scopeAlive() bool {
	if j.run.cg != nil {
		return j.run.cg.Populated()
	}
	if j.in.isPTY {
		return proc.SessionAlive(j.run.pgid)
	}
	return proc.GroupAlive(j.run.pgid)
}
