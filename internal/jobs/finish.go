package jobs

import (
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/internal/notify"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// finalize records the run's end. A service whose policy restarts it
// goes to Restarting; otherwise the job is finalized. It returns the
// run's notify socket for the caller to close.
func (j *Job) finalize(ws syscall.WaitStatus) *notify.Socket {
	j.closeStdin() // (a write in progress fails at once)
	j.mu.Lock()
	j.flushInOrderLocked(0) // (both, oldest first)
	for i := range j.out.pending {
		j.flushLocked(i)
		if b := j.out.pending[i]; b != nil { // the readers are gone: reuse it
			j.m.putOutBuf(b)
			j.out.pending[i] = nil
		}
	}
	for _, t := range []*time.Timer{j.run.overallT, j.run.idleT, j.notify.watchdogT} {
		if t != nil {
			t.Stop()
		}
	}
	j.run.overallT, j.run.idleT, j.notify.watchdogT = nil, nil, nil
	j.exitCode, j.signal = exitOf(ws)
	reason := lifecycle.RunReason(j.life, ws.Signaled(), false)
	j.endedAt = j.m.now()
	close(j.runDone)
	sock := j.notify.sock
	j.notify.sock = nil
	var attrs []any
	logInfo := j.m.logInfo()
	if logInfo || j.isService() {
		attrs = []any{"job", j.id, "pid", j.run.pid, "reason", string(reason), "signal", j.signal,
			"duration", j.endedAt.Sub(j.startedAt), "stdoutBytes", j.out.streamN[0], "stderrBytes", j.out.streamN[1]}
		if j.exitCode != nil {
			attrs = append(attrs, "exitCode", *j.exitCode)
		}
	}
	var v lifecycle.Verdict
	var end runEnd
	if j.isService() {
		attrs = append(attrs, "attempt", j.svc.attempt)
		v, end = j.verdictLocked(reason)
	}
	if j.endRunLocked(j.stepLocked(lifecycle.RunEnded{Signaled: ws.Signaled(), Verdict: v}), end) {
		delay := j.svc.restartAt.Sub(j.m.now()).Round(time.Millisecond)
		j.mu.Unlock()
		j.m.log.Warn("service run ended; restarting", append(attrs, "delay", delay)...)
		return sock
	}
	final := j.life.Reason
	j.mu.Unlock()
	if j.isService() {
		attrs = append(attrs, "finalReason", string(final))
	}
	if logInfo {
		j.m.log.Info("job exited", attrs...)
	}
	return sock
}

// closeStdin closes the write end of the job's stdin pipe, if it has one
// (outside j.mu: a write in progress fails at once).
func (j *Job) closeStdin() {
	j.mu.Lock()
	stdin := j.in.stdin
	j.in.stdin = nil
	j.mu.Unlock()
	if stdin != nil {
		stdin.Close()
	}
}

// finishLocked finalizes the job: state Exited, the terminal event, done
// closed. For a service the reason is the one that ended supervision.
func (j *Job) finishLocked() {
	if j.isService() && j.life.EndReason != "" {
		j.life.Reason = j.life.EndReason
	}
	if t := j.svc.restartT; t != nil {
		t.Stop()
		j.svc.restartT = nil
	}
	if j.life.State != Exited { // (the lifecycle core moved it there)
		j.m.log.Error("finalize a job the lifecycle has not ended", "job", j.id, "state", j.life.State.String())
	}
	if !over(j.runDone) {
		// No run ever started (a queued job killed or shut down before
		// its turn): it ends now, and nothing waits for a run.
		j.endedAt = j.m.now()
		close(j.runDone)
		if !over(j.runStarted) {
			close(j.runStarted)
		}
	}
	// Counted (active jobs, finished metric) before anyone can see it
	// ended (status, the terminal event, done): a client that saw the end
	// and then scrapes /metrics finds it counted.
	j.m.jobDone(j, j.life.Reason)
	kind := protocol.KindFailed
	if j.life.Reason == protocol.ReasonExit {
		kind = protocol.KindExited
	}
	var ran time.Duration // (none for a run that never started)
	if !j.startedAt.IsZero() {
		ran = j.endedAt.Sub(j.startedAt)
	}
	j.evs.exit = ptr(j.emitLocked(kind, j.withEndLocked(protocol.ExitPayload{
		Reason: j.life.Reason, ExitCode: j.exitCode, Signal: j.signal, Error: j.errMsg,
		DurationMs: ran.Milliseconds(),
	})))
	j.diskFinishedLocked() // (with its terminal event)
	j.closeDoneLocked()
}

// withEndLocked fills in p the job's output end, byte counts and times as
// of its end (what a terminal event carries of its final info).
func (j *Job) withEndLocked(p protocol.ExitPayload) protocol.ExitPayload {
	p.OutputEnd, p.EndedAt, p.LastOutputAt = j.out.offset, ms(j.endedAt), ms(j.lastOutputAt)
	p.StdoutBytes, p.StderrBytes = j.out.streamN[0], j.out.streamN[1]
	return p
}

// closeDoneLocked closes done and runs the AfterDone functions with the
// job's final info.
func (j *Job) closeDoneLocked() {
	close(j.done)
	j.clearPacersLocked()
	if len(j.afterDone) == 0 {
		return
	}
	info := j.infoLocked()
	fs := j.afterDone
	j.afterDone = nil
	for _, f := range fs {
		f(info)
	}
}

// AfterDone registers f to run once when the job finishes (the current
// supervision period, for a service), with its final info: on the
// goroutine that finishes it, right after its terminal event, under the
// job's lock (f must be quick and must not call into the job). It
// reports false, registering nothing, when the job has finished already.
// cancel forgets f (a no-op once it ran).
func (j *Job) AfterDone(f func(protocol.JobInfo)) (cancel func(), ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	select {
	case <-j.done:
		return nil, false
	default:
	}
	if j.afterDone == nil {
		j.afterDone = map[uint64]func(protocol.JobInfo){}
	}
	j.afterDoneN++
	id := j.afterDoneN
	j.afterDone[id] = f
	return func() {
		j.mu.Lock()
		delete(j.afterDone, id)
		j.mu.Unlock()
	}, true
}
