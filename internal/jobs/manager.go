// Package jobs is the domain of exec-supervisor: a Manager that starts,
// watches, times out, kills and finalizes child processes, keeps their
// output in bounded per-job rings, and numbers their events.
//
// It owns every child it starts: each job runs in its own process group,
// exactly one goroutine waits for each process, and every way a job can
// end (exit, signal, kill, timeouts, spawn error, shutdown) is finalized
// once with one normalized reason. It knows nothing about sockets: events
// go to a Sink, requests come in as method calls.
package jobs

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/outlog"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// jobAccount is the Manager's account of a job: its slot under
// MaxJobs, its hold on its name, its places in the orders jobs were
// created and finished in, what it costs against MaxFinishedOutput.
// Guarded by the Manager's mu unless a field says otherwise.
type jobAccount struct {
	// slot: the job holds one of the MaxJobs slots (under m.mu): from its
	// start (or a queued job's turn) to its end.
	slot bool

	// nameSt is its hold on its name (guarded by the Manager's mu; see
	// names.go).
	nameSt nameState

	// createN is its place in the order jobs were created (or restored):
	// set before the job is visible, never changed.
	createN uint64

	// finN is the job's place in the order jobs finished (guarded by the
	// Manager's mu; 0 until counted).
	finN uint64

	// svcFinN is a finished service's place in the order services
	// finished (0 while it is supervised: see Manager.finSvcs).
	svcFinN atomic.Uint64

	// finBytes is what it retained when it finished, charged to
	// MaxFinishedOutput (Manager.recentBytes): its output and what it
	// keeps of its spec (see finishedCostLocked).
	finBytes int64
}

// Manager owns every job. Create it with New, stop it with Close.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	sink  Sink
	hooks Hooks
	now   func() time.Time
	// environ is the supervisor's environment, read once; devNull is the
	// shared read-only stdin of pipe jobs.
	environ []string
	// mark is the state's mark (WithMark; "" without), environUnmarked
	// environ without the mark's variables.
	mark            string
	environUnmarked []string
	devNull         *os.File
	// devNullFd is devNull's descriptor (-1 without it), the stdin of
	// jobs without one; pidfds is whether processes are waited for
	// through pidfds.
	devNullFd int
	pidfds    bool
	// noRunLoop makes runs with pipes read by readers and waited for by
	// a waiter, as a terminal's are (tests of that path); pollSetErr,
	// when set, is what making a run's pollSet fails with (tests).
	noRunLoop  bool
	pollSetErr error
	// pollSetFailed is whether a pollSet could not be made (logged once
	// as an error, later ones at debug level).
	pollSetFailed atomic.Bool
	// tickNanos is the tick of process start times in /proc (see
	// launch.start; 0: fingerprints are read from /proc), tickChecks how
	// many more of the fingerprints so known are checked against /proc
	// (a mismatch turns the boot clock's use off).
	tickNanos  atomic.Int64
	tickChecks atomic.Int32
	bootID     string
	cgroups    *cgroups.Base
	// notifyDir holds the notify sockets of notify jobs; limitsHelper is
	// the executable that applies rlimits before exec (see internal/limits).
	notifyDir    string
	limitsHelper string
	// forkAround runs each fork and exec (WithForkAround), when set.
	forkAround func(fork func())
	// outlog keeps jobs' output on disk (WithOutputLog; nil: none does).
	outlog *outlog.Store

	// Subreaper state: reapMu excludes the reaper while a leader is being
	// started; leaders are the job processes their waiters will reap.
	reaping bool
	reapMu  sync.RWMutex
	lmu     sync.Mutex
	leaders map[int]struct{}
	reaped  atomic.Uint64
	// Reaper passes (passMu): adopted orphans of finished jobs being
	// ended (ending, see judgeOrphan) and running ones whose job was seen
	// running (orphans), by pid; hurry: the Manager stops in a hurry.
	passMu       sync.Mutex
	ending       map[int]*endingOrphan
	orphans      map[int]orphanSeen
	hurry        bool
	orphansEnded atomic.Uint64
	orphansLeft  atomic.Int64
	// stopCtx is Close's context, set before stop is closed.
	stopCtx context.Context

	mu     sync.Mutex
	jobs   map[string]*Job
	active int // jobs holding a slot under MaxJobs (Job.acct.slot)
	closed bool
	// queue holds the queued jobs in the order spawned; queueKick wakes
	// the queue runner (queue.go).
	queue     []*Job
	queueKick chan struct{}
	// finN numbers finished jobs in the order they finished (Job.acct.finN).
	finN uint64
	// createN numbers jobs in the order they were created or restored
	// (Job.acct.createN).
	createN uint64
	// Journal snapshots take live (unfinished one-shot jobs and every
	// service) and the tail of recent (finished one-shot jobs in finN
	// order; a removed one's entry is emptied at once and dropped by the
	// next sweep): their cost follows what the journal keeps, not how many
	// finished jobs retention holds.
	live   map[string]*Job
	recent []finished
	// names indexes the known jobs that have a name by it (see names.go).
	names map[string][]*Job
	// recentN and recentBytes count the jobs in recent (not emptied) and
	// the output bytes they retain; recentHead is where the oldest of them
	// may be (entries before it are empty).
	recentN     int
	recentBytes int64
	recentHead  int
	// forgotten counts finished jobs forgotten early (MaxFinished,
	// MaxFinishedOutput); forgotLogged is when that was last logged.
	forgotten    atomic.Uint64
	forgotLogged time.Time
	// finSvcs are the services whose supervision ended, in the order they
	// finished (entries of services started again or removed since are
	// dropped when found: see addFinishedServiceLocked); svcFinN
	// numbers their ends.
	finSvcs []finished
	svcFinN uint64
	// crashRecovery is when jobs were recovered from a crashed
	// predecessor (nil: none was).
	crashRecovery atomic.Pointer[time.Time]

	// watched are the running cgroup jobs' runs the escape watcher checks.
	emu     sync.Mutex
	watched map[*Job]<-chan struct{}

	// outBufs holds output merge buffers (MergeMaxBytes plus the event
	// header room) that were not handed on as event payloads: short jobs
	// would otherwise allocate two per run.
	outBufs sync.Pool

	wg   sync.WaitGroup // job goroutines and the sweeper
	stop chan struct{}
	// runners run jobs' runLoops, readers and waiters (see runners).
	runners *runners
	closeO  sync.Once
	stopO   sync.Once // closes stop (also when Close gives up waiting)
}

// Option configures a Manager.
type Option func(*Manager)

// WithClock replaces time.Now for timestamps and retention.
func WithClock(now func() time.Time) Option { return func(m *Manager) { m.now = now } }

// WithCgroups gives every job a cgroup under base (nil: process groups only).
func WithCgroups(base *cgroups.Base) Option { return func(m *Manager) { m.cgroups = base } }

// WithNotifyDir sets the directory for notify jobs' sockets (without it,
// spawning a job with notify fails).
func WithNotifyDir(dir string) Option { return func(m *Manager) { m.notifyDir = dir } }

// WithLimitsHelper sets the executable that applies rlimits and niceness
// before exec: one whose main calls limits.MaybeRunHelper first (without
// it, spawning a job with those limits fails).
func WithLimitsHelper(path string) Option { return func(m *Manager) { m.limitsHelper = path } }

// WithHooks installs lifecycle observers.
func WithHooks(h Hooks) Option { return func(m *Manager) { m.hooks = h } }

// WithForkAround has every job's fork and exec run by around (which must
// call fork once): the supervisor's CPU placement (internal/cpuhome)
// makes sure that way that the child starts with the process's whole CPU
// set whatever CPU the forking thread is kept on.
func WithForkAround(around func(fork func())) Option {
	return func(m *Manager) { m.forkAround = around }
}

// supervisorOnlyEnv are variables of the supervisor's environment that
// describe the supervisor to its service manager (systemd's notify
// socket and watchdog, socket activation) and must not reach its jobs:
// a job would talk to the supervisor's unit, or see a watchdog it does
// not have (a notify job gets its own NOTIFY_SOCKET, and WATCHDOG_USEC
// with a watchdog).
var supervisorOnlyEnv = []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"}

// jobEnviron is env without supervisorOnlyEnv.
func jobEnviron(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(supervisorOnlyEnv, k) {
			out = append(out, kv)
		}
	}
	return out
}

// New returns a running Manager. sink may be nil (events are then only
// retained, not published).
func New(cfg Config, log *slog.Logger, sink Sink, opts ...Option) *Manager {
	cfg.fill()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, log: log, sink: sink, now: time.Now, jobs: map[string]*Job{}, live: map[string]*Job{}, stop: make(chan struct{}), environ: jobEnviron(os.Environ()), bootID: proc.BootID(), leaders: map[int]struct{}{}}
	m.runners = newRunners(m.stop, &m.wg)
	m.devNullFd, m.pidfds = -1, pidfdsWork()
	m.tickNanos.Store(startTickNanos())
	m.tickChecks.Store(startTickChecks)
	if f, err := os.Open(os.DevNull); err == nil {
		m.devNull = f
		m.devNullFd = int(f.Fd())
	}
	m.outBufs.New = func() any {
		b := make([]byte, protocol.OutputHeadroom, protocol.OutputHeadroom+m.cfg.MergeMaxBytes)
		return &b
	}
	m.watched = map[*Job]<-chan struct{}{}
	for _, o := range opts {
		o(m)
	}
	m.unignoreSignals()
	m.queueKick = make(chan struct{}, 1)
	m.wg.Add(3)
	go m.sweeper()
	go m.escapeWatcher()
	go m.queueRunner()
	return m
}

func (m *Manager) getOutBuf() []byte {
	return *m.outBufs.Get().(*[]byte)
}

func (m *Manager) putOutBuf(b []byte) {
	b = b[:protocol.OutputHeadroom]
	m.outBufs.Put(&b)
}

// Config returns the effective configuration.
func (m *Manager) Config() Config { return m.cfg }

func newJobID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "j-" + hex.EncodeToString(b[:])
}

// Spawn starts a job. On a spawn failure the job is still recorded (as
// exited with reason spawn-error) and the error is a *SpawnError naming
// it.
func (m *Manager) Spawn(args protocol.SpawnArgs) (protocol.JobInfo, error) {
	_, info, err := m.SpawnJob(args)
	return info, err
}

// SpawnJob is Spawn that also returns the job (nil when none was
// recorded): a caller may hold on to it whatever retention does.
func (m *Manager) SpawnJob(args protocol.SpawnArgs) (*Job, protocol.JobInfo, error) {
	return m.SpawnJobWith(args, SpawnOptions{})
}

// SpawnOptions are what a spawn takes besides the job's own arguments.
type SpawnOptions struct {
	// Pacer, if not nil, paces the job's output from its first byte (see
	// Job.Pace, which PaceWatch is given to).
	Pacer     any
	PaceWatch func(release func()) (stop func() bool)
}

// SpawnJobWith is SpawnJob with options.
func (m *Manager) SpawnJobWith(args protocol.SpawnArgs, o SpawnOptions) (*Job, protocol.JobInfo, error) {
	if err := args.Validate(); err != nil {
		return nil, protocol.JobInfo{}, err
	}
	chosen := args.JobID != ""
	j := m.newJob(args)
	m.mu.Lock()
	for !chosen && m.jobs[j.id] != nil {
		j.id = newJobID() // (64 random bits met a caller's choice)
	}
	nameErr := m.nameTakenLocked(j, chosen)
	switch {
	case m.jobs[j.id] != nil:
		m.mu.Unlock()
		return nil, protocol.JobInfo{}, &Error{Kind: ErrAlreadyExists, JobID: j.id,
			Msg: fmt.Sprintf("job %q already exists (a job keeps its id until it is removed or forgotten): nothing was started", j.id)}
	case nameErr != nil:
		m.mu.Unlock()
		return nil, protocol.JobInfo{}, nameErr
	case m.closed:
		m.mu.Unlock()
		return nil, protocol.JobInfo{}, errorf(ErrShuttingDown, "supervisor is shutting down; not starting new jobs")
	case args.Queue && len(m.queue) >= m.cfg.MaxQueued:
		m.mu.Unlock()
		return nil, protocol.JobInfo{}, errorf(ErrTooManyJobs, "%d jobs are running and %d queued; the limits are %d (--max-jobs) and %d (--max-queued)", m.active, len(m.queue), m.cfg.MaxJobs, m.cfg.MaxQueued)
	case m.active >= m.cfg.MaxJobs && !args.Queue:
		m.mu.Unlock()
		return nil, protocol.JobInfo{}, errorf(ErrTooManyJobs, "%d jobs are running; the limit is %d (--max-jobs): wait for one to finish or kill one (or spawn with queue to wait for a slot)", m.active, m.cfg.MaxJobs)
	}
	// A queued spawn waits behind the jobs queued before it, even when a
	// slot is free (the runner gives it to the first of them).
	queued := args.Queue && (m.active >= m.cfg.MaxJobs || len(m.queue) > 0)
	if m.wantsDisk(&j.spec) {
		// (before the job is visible: j.disk never changes after; a
		// fresh writer does no I/O here)
		j.out.disk, j.out.diskErr = j.newDisk(true)
	}
	m.createN++
	j.acct.createN = m.createN
	m.jobs[j.id] = j
	m.live[j.id] = j
	m.indexNameLocked(j, true, 0)
	if queued {
		j.life.State = Queued
		m.enqueueLocked(j)
	} else {
		j.acct.slot = true
		m.active++
	}
	m.mu.Unlock()

	if o.Pacer != nil { // (after the refusals: a refused job is nobody's to pace)
		_ = j.Pace(o.Pacer, 0, o.PaceWatch) // (offset 0 cannot be refused)
	}
	if queued {
		m.changed()
		return j, j.Info(), nil
	}
	if err := j.start(); err != nil {
		return j, j.Info(), &SpawnError{JobID: j.id, Err: err}
	}
	if m.hooks.Spawned != nil {
		m.hooks.Spawned()
	}
	return j, j.Info(), nil
}

func (m *Manager) changed() {
	if m.hooks.Changed != nil {
		m.hooks.Changed()
	}
}

// jobDone counts j finished. j.mu is held (its output is final).
func (m *Manager) jobDone(j *Job, reason protocol.Reason) {
	m.mu.Lock()
	if j.acct.slot {
		j.acct.slot = false
		m.active--
		if len(m.queue) > 0 {
			m.kickQueue() // (a slot for the first queued job)
		}
	} else {
		m.dequeueLocked(j) // (ended while queued)
	}
	m.releaseNameLocked(j, ms(cmp.Or(j.endedAt, m.now())))
	forgot := 0
	if !j.isService() { // services are always journaled
		m.finN++
		j.acct.finN = m.finN
		delete(m.live, j.id)
		forgot = m.addRecentLocked(j)
	} else {
		forgot = m.addFinishedServiceLocked(j)
	}
	m.mu.Unlock()
	if forgot > 0 {
		m.noteForgotten(forgot, j.isService())
	}
	if m.hooks.Finished != nil {
		m.hooks.Finished(reason, j.isService())
	}
}

// Get returns the job with id, or a CodeNotFound error.
func (m *Manager) Get(id string) (*Job, error) {
	m.mu.Lock()
	j := m.jobs[id]
	m.mu.Unlock()
	if j == nil {
		if at := m.crashRecovery.Load(); at != nil {
			return nil, errorf(ErrNotFound, "no job of id or name %.128q (finished jobs are forgotten after the retention period; and this supervisor started at %s after its predecessor crashed: a job whose spawn it had not answered yet may be in no record)", id, at.UTC().Format(time.RFC3339))
		}
		return nil, errorf(ErrNotFound, "no job of id or name %.128q (finished jobs are forgotten after the retention period)", id)
	}
	return j, nil
}

// NoteCrashRecovery records that the manager's jobs were recovered, at
// at, from a supervisor that did not shut down (a crash): a job it had
// spawned just before may be unknown, and not-found says so.
func (m *Manager) NoteCrashRecovery(at time.Time) { m.crashRecovery.Store(&at) }

// snapshotOf lists the jobs of the set (m.jobs, m.live) set returns,
// taken under m.mu, to be looked at one by one without it.
func (m *Manager) snapshotOf(set func() map[string]*Job) []*Job {
	m.mu.Lock()
	defer m.mu.Unlock()
	js := make([]*Job, 0, len(set()))
	for _, j := range set() {
		js = append(js, j)
	}
	return js
}

// Remove forgets a finished job. A job still running gets CodeJobRunning.
func (m *Manager) Remove(id string) error {
	j, err := m.Get(id)
	if err != nil {
		return err
	}
	// Checked and deleted under the job's lock: a service cannot be
	// started again in between (startService takes the same locks).
	j.mu.Lock()
	if j.life.State != Exited {
		j.mu.Unlock()
		return errorf(ErrJobRunning, "job %s is still running: kill it first", id)
	}
	m.mu.Lock()
	m.forgetLocked(j)
	delete(m.live, j.id)
	m.forgetRecentLocked(j)
	m.mu.Unlock()
	j.mu.Unlock()
	m.changed()
	if j.out.disk != nil {
		// Removing a job forgets its output on disk too.
		if err := j.out.disk.Remove(); err != nil {
			m.log.Warn("remove job output files", "job", j.id, "err", err)
		}
	}
	return nil
}

// logInfo reports whether info-level records are logged at all.
func (m *Manager) logInfo() bool { return m.log.Enabled(context.Background(), slog.LevelInfo) }

// logDebug reports whether debug records are logged.
func (m *Manager) logDebug() bool { return m.log.Enabled(context.Background(), slog.LevelDebug) }
