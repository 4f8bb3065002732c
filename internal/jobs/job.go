package jobs

import (
	"sync"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

const sigKill = syscall.SIGKILL

// Signals with a meaning for Kill.
const (
	SigTerm = syscall.SIGTERM
	SigKill = syscall.SIGKILL
)

var streams = [2]protocol.Stream{protocol.Stdout, protocol.Stderr}

// Job is one supervised process and everything known about it.
type Job struct {
	m    *Manager
	id   string
	spec protocol.SpawnArgs

	timeout, noOutput, grace time.Duration

	mu sync.Mutex
	// done is closed once the job is finalized (replaced when a finished
	// service is started again); runDone when the current run ended.
	done    chan struct{}
	runDone chan struct{}
	// runStarted is closed once the current run's process is known (or
	// its start failed).
	runStarted chan struct{}
	// life is the job's lifecycle state: it moves only through stepLocked
	// (lifecycle.Step).
	life lifecycle.Life

	createdAt, startedAt, endedAt, lastOutputAt time.Time
	updatedAt                                   time.Time // last state change

	exitCode *int
	signal   string
	errMsg   string

	startedEv *protocol.Event
	exitEv    *protocol.Event

	// extraEvs are retained events other than started, output and exit.
	extraEvs []protocol.Event

	// afterDone are the AfterDone functions still to run (by id).
	afterDone  map[uint64]func(protocol.JobInfo)
	afterDoneN uint64

	// The job's parts: each part's type, declared in the file that owns
	// it, says what guards it.
	out     jobOutput  // its event and output stream (output.go)
	journal jobJournal // what the journal holds of it (gate.go)
	hold    jobHold    // where its output waits while it must not be read (gate.go)
	pace    jobPacing  // the clients pacing its output (pace.go)
	in      jobInput   // its stdin pipe or terminal (input.go)
	run     jobRun     // the current run's process and what watches it (run.go)
	svc     jobService // a service's restart policy and runs (service.go)
	notify  jobNotify  // what a notify job's run was told (notify.go)
	usage   jobUsage   // its last resource sample (usage.go)
	acct    jobAccount // the Manager's account of it, under the Manager's mu (manager.go)
}

// Reason is a termination reason (an alias of the wire type).
type Reason = protocol.Reason

// makeJob returns job id with spec, its channels (none closed) and an
// empty output ring: what every job has, whether spawned (newJob) or
// restored (Restore), which fill in the rest before it is visible.
func (m *Manager) makeJob(id string, spec protocol.SpawnArgs) *Job {
	return &Job{
		m: m, id: id, spec: spec,
		done:    make(chan struct{}),
		runDone: make(chan struct{}), runStarted: make(chan struct{}),
		run: jobRun{killNow: make(chan struct{})},
		in:  jobInput{wsem: make(chan struct{}, 1)},
		out: jobOutput{ring: newRing(m.cfg.RingBytes)},
	}
}

// newJob returns the job spawned with args, not yet visible.
func (m *Manager) newJob(args protocol.SpawnArgs) *Job {
	id := args.JobID
	if id == "" {
		id = newJobID()
	}
	args.JobID = "" // (the id is the job's, not part of its spec)
	j := m.makeJob(id, args)
	j.createdAt = m.now()
	j.svc.attempt = 1
	if args.Restart.Enabled() {
		// A service runs until stopped: no overall timeout unless asked
		// for (then it bounds each run).
		j.superviseSpec()
	} else {
		j.timeout = m.cfg.DefaultTimeout
	}
	j.setGraceAndWatchdog()
	if args.TimeoutMs > 0 {
		j.timeout = time.Duration(args.TimeoutMs) * time.Millisecond
	}
	if args.NoOutputTimeoutMs > 0 {
		j.noOutput = time.Duration(args.NoOutputTimeoutMs) * time.Millisecond
	}
	return j
}

// superviseSpec makes j a service under its spec's restart policy (which
// must be enabled). j is not visible yet.
func (j *Job) superviseSpec() {
	j.svc.backoff = lifecycle.NewBackoff(*j.spec.Restart)
	j.life.Service = true
}

// setGraceAndWatchdog sets the spec's watchdog interval and kill grace
// (the Manager's default grace without one). j is not visible yet.
func (j *Job) setGraceAndWatchdog() {
	j.notify.watchdog = time.Duration(j.spec.WatchdogIntervalMs) * time.Millisecond
	j.grace = j.m.cfg.Grace
	if j.spec.GraceMs > 0 {
		j.grace = time.Duration(j.spec.GraceMs) * time.Millisecond
	}
}

// ID returns the job id.
func (j *Job) ID() string { return j.id }

// Done is closed when the job is finalized (for a service: when
// supervision ended). A finished service started again gets a new channel.
func (j *Job) Done() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.done
}

// Finished reports whether the job is finalized.
func (j *Job) Finished() bool {
	select {
	case <-j.Done():
		return true
	default:
		return false
	}
}

// over reports whether ch (a run's runDone) is closed.
func over(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (j *Job) finishedAt() (time.Time, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.endedAt, j.life.State == Exited
}

// movedLocked notes a move of the state (logged, time of change,
// journal).
func (j *Job) movedLocked(from, to State) {
	if j.m.logDebug() { // (the attributes cost allocations even when not logged)
		j.m.log.Debug("job state", "job", j.id, "from", from.String(), "to", to.String())
	}
	j.updatedAt = j.m.now()
	j.m.changed()
}

// stepLocked hands ev to the lifecycle core and returns the effects to
// carry out (see applyLocked). An event the core refuses is a bug of the
// driver: logged, and nothing changes.
func (j *Job) stepLocked(ev lifecycle.Event) []lifecycle.Effect {
	before := j.life
	after, effs, err := lifecycle.Step(before, ev)
	if err != nil {
		j.m.log.Error("job lifecycle", "job", j.id, "err", err)
		return nil
	}
	j.life = after
	if after.State != before.State {
		j.movedLocked(before.State, after.State)
	}
	return effs
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
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

// keepExtraLocked retains ev among extraEvs.
func (j *Job) keepExtraLocked(ev protocol.Event) {
	if len(j.extraEvs) >= maxExtraEvs {
		j.extraEvs = append(make([]protocol.Event, 0, maxExtraEvs), j.extraEvs[len(j.extraEvs)-maxExtraEvs/2:]...)
	}
	j.extraEvs = append(j.extraEvs, ev)
}

// seqReserve is how far past a running job's last journaled seq its
// events may be numbered before the journal is written again: a
// supervisor that dies in between may have published events up to there,
// and its successor (Restore of an interrupted job) numbers the job's
// later events past them. A journal write is asked for when a quarter of
// the reserve is used, long before it runs out.
const seqReserve = 100_000

// offsetReserve is to output offsets what seqReserve is to seqs: a
// service resumed after its supervisor died writes its output from the
// journaled output end plus offsetReserve on (see Restore), past every
// byte the dead supervisor may have published. A journal write is asked
// for once a quarter of it was printed since the last one: the rest (768
// MiB) is what the job may print before that write lands.
const offsetReserve = 1 << 30

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
	if ev := j.startedEv; ev != nil && ev.Payload != nil && ev.Attempt == 0 {
		ev.Payload = nil
	}
}

// startedEventLocked is the job's first job.started event, its payload
// rebuilt if compactFinishedLocked dropped it (the same fields: a one-shot
// job's only run leads its own group, pid == pgid).
func (j *Job) startedEventLocked() protocol.Event {
	ev := *j.startedEv
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

// finishedCostLocked is what a finished one-shot job holds besides its
// output ring and its fixed-size structures (those are bounded by
// MaxFinished), in bytes: its argv, shell, cwd, labels and session id,
// its error message, and its retained events other than output. It is
// charged with its output to MaxFinishedOutput: a job spawned with 256 KiB
// of argv costs that much whether it printed anything or not. j.mu must
// be held (or j not yet visible).
func (j *Job) finishedCostLocked() int64 {
	const strHdr = 16   // a string header (a slice element, a map key or value)
	const mapEntry = 16 // a map entry's share of its buckets, roughly
	const evHdr = 96    // an event's fixed fields
	n := len(j.spec.Name) + len(j.spec.Shell) + len(j.spec.Cwd) + len(j.spec.SessionID) + len(j.errMsg) + len(j.notify.status)
	for _, a := range j.spec.Argv {
		n += strHdr + len(a)
	}
	for k, v := range j.spec.Labels {
		n += 2*strHdr + mapEntry + len(k) + len(v)
	}
	for k, v := range j.spec.Env { // (none once compacted)
		n += 2*strHdr + mapEntry + len(k) + len(v)
	}
	for _, ev := range []*protocol.Event{j.startedEv, j.exitEv} {
		if ev != nil {
			n += evHdr + len(ev.Payload)
		}
	}
	if j.exitEv == nil { // (the terminal event, which quotes the error, is emitted right after)
		n += evHdr + 64 + len(j.errMsg)
	}
	for _, ev := range j.extraEvs {
		n += evHdr + len(ev.Payload)
	}
	return int64(n)
}
