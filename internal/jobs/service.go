package jobs

import (
	"fmt"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// jobService is a service job's restart policy and the state of its
// runs (backoff nil: a one-shot job). Guarded by Job.mu; backoff is
// set before the job is visible and never changed.
type jobService struct {
	// Service jobs (restart policy): the Backoff decides restarts;
	// attempt is the current run's number; runOffset the output offset
	// where it began.
	backoff   *lifecycle.Backoff
	attempt   int
	restarts  int
	restartT  *time.Timer
	restartAt time.Time
	runOffset int64

	// restartReq: the run is being ended by the restart op.
	restartReq bool
	history    []protocol.RunRecord

	// restartGen tells a restart timer of an earlier delay from the
	// current one.
	restartGen uint64
}

// isService reports whether j has a restart policy (is a service, running
// or finished). It may be called without j.mu: backoff is set before the
// job is visible and never changed. (j.life.Service says the same to the
// lifecycle core, but is guarded by j.mu.)
func (j *Job) isService() bool { return j.svc.backoff != nil }

// runEnd is what a service's run end leaves for scheduling the next run
// (see scheduleRestartLocked).
type runEnd struct {
	rec      protocol.RunRecord
	ran      time.Duration
	inWindow int
}

// verdictLocked asks a service's restart policy about the run that just
// ended with reason (its exit status, endedAt and runDone already
// recorded), and records the run in the history. Nothing is asked once
// something ended supervision (a stop, kill or shutdown). The lifecycle
// core turns the verdict into the job's fate (RunEnded).
func (j *Job) verdictLocked(reason Reason) (lifecycle.Verdict, runEnd) {
	now := j.m.now()
	ran := j.endedAt.Sub(j.startedAt)
	if j.startedAt.IsZero() || j.life.State == Starting {
		ran = 0
	}
	rec := j.runRecordLocked(reason)
	if h := j.m.hooks.RunEnded; h != nil {
		h(rec.Reason)
	}
	var v lifecycle.Verdict
	inWindow := 0
	switch {
	case j.life.EndReason != "":
		// Stopped or killed.
	case j.m.closing():
		// The supervisor is going away (a drain: --shutdown=wait). A run
		// its policy would restart ends supervision as a shutdown does,
		// so that the next supervisor resumes the service.
		v.Closing = j.svc.restartReq || j.svc.backoff.Wants(reason, j.exitCode)
	case j.svc.restartReq:
		j.svc.backoff.Reset()
		v.Restart = true
		rec.Reason = protocol.ReasonManualRestart
	case j.svc.backoff.Wants(reason, j.exitCode):
		v.Delay, inWindow, v.Limited = j.svc.backoff.Next(now, ran)
		if v.Limited {
			last := describeEnd(reason, j.exitCode, j.signal)
			j.errMsg = fmt.Sprintf("%d run ends within %v (maxRestarts %d); last run: %s; start it again with start or restart",
				inWindow, time.Duration(j.svc.backoff.Policy.RestartWindowMs)*time.Millisecond, *j.svc.backoff.Policy.MaxRestarts, last)
			j.m.log.Error("service hit its restart limit; not restarting", "job", j.id, "attempt", j.svc.attempt, "lastRun", last)
		} else {
			v.Restart = true
		}
	}
	rec.Restarted = v.Restart
	j.svc.history = append(j.svc.history, rec)
	if n := len(j.svc.history) - protocol.HistoryRuns; n > 0 {
		j.svc.history = append(j.svc.history[:0:0], j.svc.history[n:]...)
	}
	return v, runEnd{rec: rec, ran: ran, inWindow: inWindow}
}

// endRunLocked carries out the lifecycle core's effects of a run's end:
// the restart scheduled (it reports true), or the job finished.
func (j *Job) endRunLocked(effs []lifecycle.Effect, end runEnd) (restarting bool) {
	for _, e := range effs {
		switch e := e.(type) {
		case lifecycle.ScheduleRestart:
			j.scheduleRestartLocked(e.Delay, end)
			restarting = true
		case lifecycle.Finish:
			j.finishLocked()
		default:
			j.m.log.Error("job lifecycle: effect not carried out at a run's end", "job", j.id, "effect", fmt.Sprintf("%T", e))
		}
	}
	return restarting
}

// scheduleRestartLocked arms the next run of a service now Restarting,
// after delay.
func (j *Job) scheduleRestartLocked(delay time.Duration, end runEnd) {
	j.svc.restarts++
	j.svc.restartAt = j.m.now().Add(delay)
	j.keepExtraLocked(j.emitLocked(protocol.KindRestarting, protocol.RestartingPayload{
		Attempt: j.svc.attempt, NextAttempt: j.svc.attempt + 1, Reason: end.rec.Reason, ExitCode: j.exitCode,
		Signal: j.signal, Error: j.errMsg, DurationMs: end.ran.Milliseconds(), DelayMs: delay.Milliseconds(),
		RestartAt: ms(j.svc.restartAt), RestartsInWindow: end.inWindow,
	}))
	if h := j.m.hooks.Restarted; h != nil {
		h()
	}
	j.svc.restartGen++
	gen := j.svc.restartGen
	j.svc.restartT = time.AfterFunc(delay, func() { j.restartFired(gen) })
}

func describeEnd(r Reason, code *int, sig string) string {
	switch {
	case code != nil:
		return fmt.Sprintf("%s, exit code %d", r, *code)
	case sig != "":
		return fmt.Sprintf("%s, %s", r, sig)
	}
	return string(r)
}

// restartFired starts the next run once the restart delay is over.
func (j *Job) restartFired(gen uint64) {
	j.mu.Lock()
	if j.life.State != Restarting || gen != j.svc.restartGen {
		j.mu.Unlock()
		return // stopped, killed or started by hand meanwhile
	}
	j.svc.restartT = nil
	if j.m.closing() {
		j.endRunLocked(j.stepLocked(lifecycle.Drained{}), runEnd{})
		j.mu.Unlock()
		return
	}
	j.beginRunLocked()
	j.mu.Unlock()
	_ = j.start()
}

// beginRunLocked resets the per-run state for the next attempt and moves
// the job to Starting; the caller then calls start.
func (j *Job) beginRunLocked() {
	if t := j.svc.restartT; t != nil {
		t.Stop()
		j.svc.restartT = nil
	}
	j.stepLocked(lifecycle.NextRun{}) // (Starting, nothing of the last run's fate)
	j.svc.attempt++
	j.svc.runOffset = j.out.offset
	j.run.proc = nil
	j.run.pid, j.run.pgid = 0, 0
	j.run.startTicks = 0
	j.exitCode, j.signal, j.errMsg = nil, "", ""
	j.endedAt = time.Time{} // (the last run's end: this one has none yet)
	j.run.killDeadline = time.Time{}
	j.run.killNow = make(chan struct{})
	j.run.rfiles, j.in.ptmx, j.in.stdin = nil, nil, nil
	j.in.bracketed, j.run.escaped = false, false
	j.run.cg = nil
	j.usage.lastCPU, j.usage.lastSampled = 0, time.Time{}
	j.notify.ready, j.notify.status, j.notify.stopping, j.notify.lastWatchdog = false, "", false, time.Time{}
	j.run.limits = nil
	j.svc.restartReq = false
	j.svc.restartAt = time.Time{}
	j.runDone = make(chan struct{})
	j.runStarted = make(chan struct{})
}

// Start runs a service job again: at once if it is waiting to restart,
// from scratch (backoff reset, the same spec) if it ended. A running
// service is left alone.
func (m *Manager) Start(id string) (protocol.JobInfo, error) {
	return m.startService(id, false)
}

// Restart ends a service's current run (TERM, grace, KILL; reason
// manual-restart in its history) and starts the next at once; a service
// that is not running is started.
func (m *Manager) Restart(id string) (protocol.JobInfo, error) {
	return m.startService(id, true)
}

func (m *Manager) startService(id string, restart bool) (protocol.JobInfo, error) {
	j, err := m.Get(id)
	if err != nil {
		return protocol.JobInfo{}, err
	}
	j.mu.Lock()
	if !j.isService() {
		j.mu.Unlock()
		return protocol.JobInfo{}, errorf(ErrInvalid,
			"job %s is not a service (spawned without a restart policy); spawn it again instead", id)
	}
	switch j.life.State {
	case Starting:
		j.mu.Unlock()
		if restart {
			return j.Info(), errorf(ErrJobRunning, "job %s is starting; try again in a moment", id)
		}
		return j.Info(), nil
	case Running:
		if !restart {
			j.mu.Unlock()
			return j.Info(), nil
		}
		j.svc.restartReq = true
		runDone := j.runDone
		j.mu.Unlock()
		m.log.Info("service restart requested", "job", id)
		// Bound to this run: if it ends by itself meanwhile, the restart
		// it asked for happens anyway and the next run is left alone.
		if _, err := j.kill(runDone, protocol.ReasonManualRestart, 0); err != nil {
			return j.Info(), err
		}
		return j.Info(), nil
	case Exiting:
		j.mu.Unlock()
		return j.Info(), errorf(ErrJobRunning, "job %s is stopping; start it once it has exited", id)
	case Restarting:
		j.svc.backoff.Reset()
		j.beginRunLocked()
		j.mu.Unlock()
		m.log.Info("service started again (start op or resume) while waiting to restart", "job", id)
		err := j.start()
		return j.Info(), startErr(j, err)
	}
	// Exited: supervision starts over with the recorded spec (a job
	// restored without a usable spec has no svc and was refused above).
	m.mu.Lock()
	nameErr := m.nameTakenLocked(j, false)
	switch {
	case m.jobs[id] != j:
		m.mu.Unlock()
		j.mu.Unlock()
		return protocol.JobInfo{}, errorf(ErrNotFound, "job %s was removed", id)
	case m.closed:
		m.mu.Unlock()
		j.mu.Unlock()
		return protocol.JobInfo{}, errorf(ErrShuttingDown, "supervisor is shutting down; not starting jobs")
	case m.active >= m.cfg.MaxJobs:
		m.mu.Unlock()
		j.mu.Unlock()
		return protocol.JobInfo{}, errorf(ErrTooManyJobs, "%d jobs are running; the limit is %d (--max-jobs)", m.active, m.cfg.MaxJobs)
	case nameErr != nil:
		m.mu.Unlock()
		j.mu.Unlock()
		return protocol.JobInfo{}, nameErr
	}
	j.acct.slot = true
	m.active++
	if j.name() != "" {
		j.acct.nameSt.held = true
	}
	j.acct.svcFinN.Store(0) // (supervised again: not a finished service)
	m.mu.Unlock()
	// The old terminal event stays in the sequence; a new one follows
	// when this supervision ends.
	if j.evs.exit != nil {
		j.keepExtraLocked(*j.evs.exit)
		j.evs.exit = nil
	}
	j.done = make(chan struct{})
	j.svc.backoff.Reset()
	j.beginRunLocked()
	j.mu.Unlock()
	m.log.Info("service started again (start op or resume)", "job", id)
	err = j.start()
	if err == nil && m.hooks.Spawned != nil {
		m.hooks.Spawned()
	}
	return j.Info(), startErr(j, err)
}

func startErr(j *Job, err error) error {
	if err == nil {
		return nil
	}
	return &SpawnError{JobID: j.id, Err: err}
}

// Stop ends a job gracefully (TERM, grace, KILL) with reason stopped; a
// service is not restarted, and one waiting to restart ends at once.
func (m *Manager) Stop(id string) (protocol.KillResult, error) {
	j, err := m.Get(id)
	if err != nil {
		return protocol.KillResult{}, err
	}
	already, err := j.Kill(protocol.ReasonStopped, 0)
	if err != nil {
		return protocol.KillResult{}, err
	}
	return protocol.KillResult{Job: j.Info(), AlreadyFinished: already}, nil
}

// serviceInfoLocked fills the service fields of info.
func (j *Job) serviceInfoLocked(info *protocol.JobInfo) {
	if !j.isService() {
		return
	}
	now := j.m.now()
	info.Restart = j.svc.backoff.Policy.Policy
	info.Attempt = j.svc.attempt
	info.Restarts = j.svc.restarts
	info.RestartsInWindow = j.svc.backoff.InWindow(now)
	if j.life.State == Restarting {
		info.NextRestartAt = ms(j.svc.restartAt)
	}
	if j.life.State == Running || j.life.State == Exiting {
		info.UptimeMs = now.Sub(j.startedAt).Milliseconds()
	}
}
