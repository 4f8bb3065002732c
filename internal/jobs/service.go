package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/internal/limits"
	"github.com/exec-supervisor/exec-supervisor/internal/notify"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
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

// jobNotify is what a notify job's run was told through its notify
// socket (sd_notify: READY, STATUS, STOPPING, WATCHDOG). Guarded by
// Job.mu; watchdog is set before the job is visible, never changed.
type jobNotify struct {
	// Notify jobs: the run's notify socket and what it was told.
	sock         *notify.Socket
	ready        bool
	status       string
	stopping     bool
	lastWatchdog time.Time
	watchdog     time.Duration
	watchdogT    *time.Timer
}

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

// runRecordLocked describes the run that just ended with reason, with its
// last lines.
func (j *Job) runRecordLocked(reason Reason) protocol.RunRecord {
	rec := protocol.RunRecord{
		Attempt: j.svc.attempt, StartedAt: ms(j.startedAt), EndedAt: ms(j.endedAt), Pid: j.run.pid,
		Reason: reason, ExitCode: j.exitCode, Signal: j.signal, Error: j.errMsg,
		Tail: []string{},
	}
	if !j.startedAt.IsZero() && j.life.State != Starting {
		rec.DurationMs = j.endedAt.Sub(j.startedAt).Milliseconds()
	} else {
		rec.StartedAt, rec.Pid = 0, 0
	}
	rec.Tail = TailLines(j.runOutputLocked(protocol.HistoryTailBytes), protocol.HistoryLines)
	return rec
}

// runOutputLocked returns up to max of the newest retained bytes of the
// current run's output (stdout and stderr interleaved as produced).
func (j *Job) runOutputLocked(max int) []byte {
	live := j.out.ring.live()
	var parts [][]byte
	n := 0
	for i := len(live) - 1; i >= 0 && n < max; i-- {
		c := live[i]
		d := c.Data
		if end := c.Offset + int64(len(d)); end <= j.svc.runOffset {
			break
		}
		if c.Offset < j.svc.runOffset {
			d = d[j.svc.runOffset-c.Offset:]
		}
		if room := max - n; len(d) > room {
			d = d[len(d)-room:]
		}
		parts = append(parts, d)
		n += len(d)
	}
	out := make([]byte, 0, n)
	for i := len(parts) - 1; i >= 0; i-- {
		out = append(out, parts[i]...)
	}
	return out
}

// maxHistoryLine cuts very long lines of a run record.
const maxHistoryLine = 2 << 10

// TailLines splits b into lines and returns the last n (CR LF and LF
// endings; a partial last line counts; invalid UTF-8 is replaced).
func TailLines(b []byte, n int) []string {
	b = bytes.TrimSuffix(b, []byte("\n"))
	if len(b) == 0 {
		return []string{}
	}
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) > maxHistoryLine {
			l = append(l[:maxHistoryLine:maxHistoryLine], "…"...)
		}
		s := string(l)
		if !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		out[i] = s
	}
	return out
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
	if j.svc.backoff == nil {
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
	if j.exitEv != nil {
		j.keepExtraLocked(*j.exitEv)
		j.exitEv = nil
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

// History returns the job's ended runs, oldest first.
func (j *Job) History() []protocol.RunRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]protocol.RunRecord, len(j.svc.history))
	copy(out, j.svc.history)
	return out
}

// serviceInfoLocked fills the service and notify fields of info.
func (j *Job) serviceInfoLocked(info *protocol.JobInfo) {
	info.Notify = j.spec.Notify
	if j.spec.Notify && (j.life.State == Running || j.life.State == Exiting) {
		info.Ready, info.NotifyStatus, info.Stopping = j.notify.ready, j.notify.status, j.notify.stopping
		info.LastWatchdogAt = ms(j.notify.lastWatchdog)
	}
	info.Limits = j.run.limits
	if j.svc.backoff == nil {
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

// notifyPath is the current run's notify socket path (its directory is
// made when missing; never through a symlink).
func (j *Job) notifyPath() (string, error) {
	dir := j.m.notifyDir
	if dir == "" {
		return "", fmt.Errorf("notify needs the supervisor's state directory (none configured)")
	}
	if err := notify.EnsureDir(dir); err != nil {
		return "", fmt.Errorf("notify socket directory: %w", err)
	}
	return filepath.Join(dir, fmt.Sprintf("%s.%d.sock", j.id, j.svc.attempt)), nil
}

// openNotify creates the run's notify socket and returns env with
// NOTIFY_SOCKET (and WATCHDOG_USEC) set. Only processes of this run (its
// cgroup, else its process group or session) are heard.
func (j *Job) openNotify(env []string, runDone, runStarted <-chan struct{}) ([]string, error) {
	path, err := j.notifyPath()
	if err != nil {
		return env, err
	}
	accept := func(pid int) bool {
		// The child may speak before start() recorded it: wait for that.
		select {
		case <-runStarted:
		case <-runDone:
			return false
		}
		return j.ownsPid(pid, runDone)
	}
	sock, err := notify.Listen(path, accept, func(msg notify.Message) { j.notified(msg, runDone) })
	if err != nil {
		return env, fmt.Errorf("notify socket: %w", err)
	}
	j.mu.Lock()
	j.notify.sock = sock
	j.mu.Unlock()
	env = setEnv(env, "NOTIFY_SOCKET", sock.Addr())
	if j.notify.watchdog > 0 {
		env = setEnv(env, "WATCHDOG_USEC", strconv.FormatInt(j.notify.watchdog.Microseconds(), 10))
	}
	return env, nil
}

func closeNotify(s *notify.Socket) {
	if s != nil {
		_ = s.Close()
	}
}

// ownsPid reports whether pid is a process of the current run.
func (j *Job) ownsPid(pid int, runDone <-chan struct{}) bool {
	j.mu.Lock()
	cg, pgid, isPTY := j.run.cg, j.run.pgid, j.in.isPTY
	gone := over(runDone)
	j.mu.Unlock()
	if gone || pid <= 1 {
		return false
	}
	if cg != nil {
		for _, p := range cg.Procs() {
			if p == pid {
				return true
			}
		}
		return false
	}
	p, ok := proc.Lookup(pid)
	if !ok {
		return false
	}
	if isPTY {
		return p.Sid == pgid
	}
	return p.Pgid == pgid
}

// notified applies one notify message of the run.
func (j *Job) notified(msg notify.Message, runDone <-chan struct{}) {
	j.mu.Lock()
	if over(runDone) {
		j.mu.Unlock()
		return
	}
	if st, ok := msg.Status(); ok {
		j.notify.status = truncateUTF8(st, 1024)
	}
	if msg.Stopping() {
		j.notify.stopping = true
	}
	if msg.Watchdog() {
		j.notify.lastWatchdog = j.m.now()
	}
	trigger := msg.Fields["WATCHDOG"] == "trigger"
	if msg.Ready() && !j.notify.ready {
		j.notify.ready = true
		j.keepExtraLocked(j.emitLocked(protocol.KindReady, protocol.ReadyPayload{Attempt: j.svc.attempt, Status: j.notify.status}))
		j.m.log.Info("job ready", "job", j.id, "attempt", j.svc.attempt, "status", j.notify.status)
	}
	j.m.changed()
	j.mu.Unlock()
	if trigger {
		j.m.log.Warn("job asked for its watchdog to fire (WATCHDOG=trigger)", "job", j.id)
		j.killRun(runDone, protocol.ReasonWatchdog)
	}
}

func truncateUTF8(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// watchdogFired checks the run's last WATCHDOG=1: a run silent for the
// whole interval is hung and killed with reason watchdog.
func (j *Job) watchdogFired(runDone <-chan struct{}) {
	j.mu.Lock()
	if over(runDone) || j.life.State != Running {
		j.mu.Unlock()
		return
	}
	last := j.notify.lastWatchdog
	if last.IsZero() || last.Before(j.startedAt) {
		last = j.startedAt
	}
	if quiet := j.m.now().Sub(last); quiet < j.notify.watchdog {
		j.notify.watchdogT = time.AfterFunc(j.notify.watchdog-quiet, func() { j.watchdogFired(runDone) })
		j.mu.Unlock()
		return
	}
	j.mu.Unlock()
	j.m.log.Warn("job missed its watchdog; killing it as hung", "job", j.id, "interval", j.notify.watchdog)
	j.killRun(runDone, protocol.ReasonWatchdog)
}

// rlimits returns the child-side limits of the spec.
func (j *Job) rlimits() limits.Limits {
	l := j.spec.Limits
	if l == nil {
		return limits.Limits{}
	}
	return limits.Limits{NoFile: l.MaxOpenFiles, AddressSpace: l.MaxAddressSpaceBytes, Nice: l.Nice}
}

// wrapLimits makes cmd start through the limits helper when the spec has
// rlimits or a niceness, and records them as applied.
func (j *Job) wrapLimits(path string, argv []string) (string, []string, error) {
	l := j.rlimits()
	if l.Empty() {
		return path, argv, nil
	}
	if j.m.limitsHelper == "" {
		return "", nil, errors.New("limits.maxOpenFiles, maxAddressSpaceBytes and nice need a limits helper, and none is configured (the supervisor always has one; pkg/local's Engine needs Options.LimitsHelper)")
	}
	cp, ca := limits.Wrap(j.m.limitsHelper, l, path, argv)
	var applied []string
	if l.NoFile > 0 {
		applied = append(applied, fmt.Sprintf("maxOpenFiles=%d", l.NoFile))
	}
	if l.AddressSpace > 0 {
		applied = append(applied, fmt.Sprintf("maxAddressSpaceBytes=%d", l.AddressSpace))
	}
	if l.Nice != nil {
		applied = append(applied, fmt.Sprintf("nice=%d", *l.Nice))
	}
	j.recordLimits(applied, nil)
	return cp, ca, nil
}

// recordLimits adds to what the current run's limits info reports.
func (j *Job) recordLimits(applied []string, unavailable map[string]string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.run.limits == nil {
		j.run.limits = &protocol.LimitsInfo{}
	}
	j.run.limits.Applied = append(j.run.limits.Applied, applied...)
	for k, v := range unavailable {
		if j.run.limits.Unavailable == nil {
			j.run.limits.Unavailable = map[string]string{}
		}
		j.run.limits.Unavailable[k] = v
	}
}

// hasCgroupLimits reports whether the spec asks for cgroup limits.
func (j *Job) hasCgroupLimits() bool {
	l := j.spec.Limits
	return l != nil && (l.MemoryMaxBytes != 0 || l.CPUWeight != 0)
}

// applyCgroupLimits writes the spec's cgroup limits on the run's new
// cgroup (before any process is in it) and records what took.
func (j *Job) applyCgroupLimits(cg *cgroups.Cgroup) {
	if !j.hasCgroupLimits() {
		return
	}
	res := cg.SetLimits(j.spec.Limits.MemoryMaxBytes, j.spec.Limits.CPUWeight)
	j.recordLimits(res.Applied, res.Unavailable)
	if len(res.Unavailable) > 0 {
		j.m.log.Warn("job cgroup limits not applied", "job", j.id, "unavailable", res.Unavailable)
	}
}

// noCgroupLimits records cgroup limits as unavailable (no cgroup per job).
func (j *Job) noCgroupLimits() {
	if !j.hasCgroupLimits() {
		return
	}
	why := "no cgroup per job (cgroup v2 not writable here, or --no-cgroups); see health.cgroupsNote"
	unavailable := map[string]string{}
	if j.spec.Limits.MemoryMaxBytes > 0 {
		unavailable["memory.max"] = why
	}
	if j.spec.Limits.CPUWeight > 0 {
		unavailable["cpu.weight"] = why
	}
	j.recordLimits(nil, unavailable)
	j.m.log.Warn("job cgroup limits not applied: no cgroup per job", "job", j.id)
}
