package jobs

import "github.com/exec-supervisor/exec-supervisor/pkg/protocol"

// jobEvents are the events a job retains besides its output (which its
// ring retains): its first job.started, its terminal event, and the
// others in seq order (later runs' starts, restarts, readiness, ownership
// escapes, the terminal events of earlier supervisions), bounded by
// maxExtraEvs. Guarded by Job.mu.
type jobEvents struct {
	started *protocol.Event
	exit    *protocol.Event
	// extra are retained events other than started, output and exit.
	extra []protocol.Event
}

// emitLocked numbers and publishes an event. j.mu must be held.
func (j *Job) emitLocked(kind protocol.Kind, payload any) protocol.Event {
	j.nextSeqLocked()
	ev, err := protocol.NewEvent(j.id, j.out.seq, ms(j.m.now()), kind, payload)
	if err != nil {
		// Payloads are our own plain structs; this cannot happen.
		j.m.log.Error("encode event", "job", j.id, "kind", string(kind), "err", err)
	}
	ev.Attempt = j.attemptTag()
	if j.m.sink != nil {
		j.m.sink.Publish(ev)
	}
	return ev
}

// maxExtraEvs bounds a job's retained events other than its first start,
// its output and its end: a service restarted for weeks adds a start and
// a job.restarting per run (a leak audit watched a crash-looping one grow
// by thousands). Past it the older half goes; subscribe reports them
// missing, as evicted output.
const maxExtraEvs = 512

// keepExtraLocked retains ev among j.evs.extra.
func (j *Job) keepExtraLocked(ev protocol.Event) {
	if len(j.evs.extra) >= maxExtraEvs {
		j.evs.extra = append(make([]protocol.Event, 0, maxExtraEvs), j.evs.extra[len(j.evs.extra)-maxExtraEvs/2:]...)
	}
	j.evs.extra = append(j.evs.extra, ev)
}

// startedEventLocked is the job's first job.started event, its payload
// rebuilt if compactFinishedLocked dropped it (the same fields: a one-shot
// job's only run leads its own group, pid == pgid).
func (j *Job) startedEventLocked() protocol.Event {
	ev := *j.evs.started
	if ev.Payload == nil {
		rebuilt, err := protocol.NewEvent(j.id, ev.Seq, ev.Ts, ev.Kind, j.startedPayload(j.run.pid, ev.Attempt))
		if err == nil {
			ev.Payload = rebuilt.Payload
		}
	}
	return ev
}

// startedPayload is the payload of the job.started event of a run whose
// process is pid (it leads its own group, or session) and attempt.
func (j *Job) startedPayload(pid, attempt int) protocol.StartedPayload {
	return protocol.StartedPayload{Pid: pid, Pgid: pid, Argv: j.spec.Argv, Shell: j.spec.Shell, Cwd: j.spec.Cwd,
		Labels: j.spec.Labels, SessionID: j.spec.SessionID, Attempt: attempt}
}

// compactFinishedLocked drops what a finished one-shot job holds that
// nothing reads any more: its env (read only to start its run: status,
// list and the journal do not show it, and a one-shot job is never
// started again) and the encoded payload of its job.started event, a
// second copy of its argv, shell, cwd and labels (rebuilt from them when
// subscribe asks for it: startedEventLocked). j.mu must be held (or j not
// yet visible).
func (j *Job) compactFinishedLocked() {
	if j.isService() {
		return // (started again with its whole spec)
	}
	j.spec.Env = nil
	if ev := j.evs.started; ev != nil && ev.Payload != nil && ev.Attempt == 0 {
		ev.Payload = nil
	}
}
