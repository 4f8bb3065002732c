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

	// afterDone are the AfterDone functions still to run (by id).
	afterDone  map[uint64]func(protocol.JobInfo)
	afterDoneN uint64

	// The job's parts: each part's type, declared in the file that owns
	// it, says what guards it.
	out     jobOutput  // its event and output stream (output.go)
	evs     jobEvents  // the events it retains besides its output (events.go)
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
	j := &Job{
		m: m, id: id, spec: spec,
		done:    make(chan struct{}),
		runDone: make(chan struct{}), runStarted: make(chan struct{}),
		run: jobRun{killNow: make(chan struct{})},
		in:  jobInput{wsem: make(chan struct{}, 1)},
		out: jobOutput{ring: newRing(m.cfg.RingBytes)},
	}
	// (A restored one-shot job too: the reaper gives its orphans this
	// grace; it had none, and they were killed at once.)
	j.setGraceAndWatchdog()
	return j
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
