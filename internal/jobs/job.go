package jobs

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/internal/notify"
	"github.com/exec-supervisor/exec-supervisor/internal/outlog"
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

	// slot: the job holds one of the MaxJobs slots (under m.mu): from its
	// start (or a queued job's turn) to its end.
	slot bool

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
	life       lifecycle.Life
	proc       *child
	pid, pgid  int
	startTicks uint64

	createdAt, startedAt, endedAt, lastOutputAt time.Time
	updatedAt                                   time.Time // last state change

	exitCode *int
	signal   string
	errMsg   string

	// killDeadline is when SIGKILL follows the first kill.
	killDeadline time.Time
	killNow      chan struct{} // closed to escalate to SIGKILL at once
	// termLine is what the writes to a PTY job's terminal left of an
	// unfinished line (under wsem: see WriteInput).
	termLine int
	// svcFinN is a finished service's place in the order services
	// finished (0 while it is supervised: see Manager.finSvcs).
	svcFinN atomic.Uint64
	// leaderWS is how a one-shot job's leader ended, while the rest of
	// its group is terminated (journaled: see Snapshot.LeaderExit).
	leaderWS *syscall.WaitStatus

	seq uint64
	out *ring
	// disk writes the job's output to its files (nil: memory only; set
	// before the job is visible, never changed); diskErr is why it could
	// not be opened.
	disk    *outlog.Writer
	diskErr string
	offset  int64 // combined output offset of the next byte
	streamN [2]int64
	pending [2][]byte
	flushT  [2]*time.Timer
	// flushedAt is when each stream's output last became an event (zero:
	// never): output read a whole merge window after it goes out at once
	// (see mergeLocked).
	flushedAt [2]time.Time
	// pendingSince orders the streams' pending output by when its first
	// byte was read (from pendingN): flushes go oldest first, so that the
	// output's order across streams is the order it was read in.
	pendingSince [2]uint64
	pendingN     uint64
	// seqSnap is the job's last seq in the journal as last written (its
	// record reserves seqs up to seqSnap+seqReserve; see Journaled), and
	// offSnap its output end (offsets up to offSnap+offsetReserve);
	// reserveAsked is set once a new write was asked for.
	seqSnap      uint64
	offSnap      int64
	reserveAsked bool
	// onDisk is set once a record of the job reached the journal (see
	// Journaled; a restored job came from one): only then does a
	// successor number past seqSnap and offSnap, and only then is output
	// held at the reserve gate.
	onDisk bool
	// gate, while output is held (see gatedLocked), is closed when it may
	// be read again (see awaitGate).
	gate chan struct{}
	// heldJournal: output is held for the journal (gatedLocked), as
	// reported (OutputHeld hook, outputHeld in status).
	heldJournal bool
	// pacers are the clients that pace the job's output (see Pace).
	pacers map[any]*pacer
	// paceTimer, while output waits for a pacer, fires when the longest
	// silent pacer has stalled (see paceStalled).
	paceTimer *time.Timer
	paceGen   uint64 // (which paceTimer a firing is of)
	// unheldAt is when held output was last let go: the no-output
	// watchdog counts from it too (a held job was not quiet).
	unheldAt time.Time
	// overallT and idleT end the run at its overall and its no-output
	// timeout (see start).
	overallT  *time.Timer
	idleT     *time.Timer
	startedEv *protocol.Event
	exitEv    *protocol.Event

	// readersLeft counts the run's output readers still reading; the last
	// one closes readersDone.
	readersLeft atomic.Int32
	readersDone chan struct{}
	rfiles      []*os.File

	// isPTY jobs run in their own session on a terminal: ptmx is its
	// master side (read for output, written for input). Pipe jobs spawned
	// with stdin have stdin, the write end of their stdin pipe.
	isPTY      bool
	ptmx       *os.File
	stdin      *os.File
	rows, cols uint16
	bracketed  bool
	// bpEdge holds the last bytes of the terminal's output (bpEdgeN of
	// them), for trackBracketedPasteLocked.
	bpEdge  [bpEdgeLen]byte
	bpEdgeN int
	// wsem serializes writes to the job's input (a semaphore, so that
	// waiting for it counts against the write's time bound).
	wsem chan struct{}

	// cg is the job's cgroup (nil without cgroup support).
	cg      *cgroups.Cgroup
	escaped bool // an ownership escape was reported
	// extraEvs are retained events other than started, output and exit.
	extraEvs []protocol.Event

	// lastCPU and lastSampled are the previous resource sample (for CPU%),
	// lastUsage what it answered (reused while fresh: see usageFresh).
	lastCPU     float64
	lastSampled time.Time
	lastUsage   protocol.Usage

	// Service jobs (restart policy): the Backoff decides restarts;
	// attempt is the current run's number; runOffset the output offset
	// where it began.
	svc       *lifecycle.Backoff
	attempt   int
	restarts  int
	restartT  *time.Timer
	restartAt time.Time
	runOffset int64
	// restartReq: the run is being ended by the restart op.
	restartReq bool
	history    []protocol.RunRecord

	// Notify jobs: the run's notify socket and what it was told.
	notifySock   *notify.Socket
	ready        bool
	notifyStatus string
	lastWatchdog time.Time
	stopping     bool
	watchdog     time.Duration
	watchdogT    *time.Timer
	// limits is what the current run's limits info reports (see
	// recordLimits).
	limits *protocol.LimitsInfo
	// restartGen tells a restart timer of an earlier delay from the
	// current one.
	restartGen uint64
	// finN is the job's place in the order jobs finished (guarded by the
	// Manager's mu; 0 until counted).
	finN uint64
	// createN is its place in the order jobs were created (or restored):
	// set before the job is visible, never changed.
	createN uint64
	// nameSt is its hold on its name (guarded by the Manager's mu; see
	// names.go).
	nameSt nameState
	// finBytes is what it retained when it finished, charged to
	// MaxFinishedOutput (Manager.recentBytes): its output and what it
	// keeps of its spec (see finishedCostLocked).
	finBytes int64
	// afterDone are the AfterDone functions still to run (by id).
	afterDone  map[uint64]func(protocol.JobInfo)
	afterDoneN uint64
}

// Reason is a termination reason (an alias of the wire type).
type Reason = protocol.Reason

func (m *Manager) newJob(args protocol.SpawnArgs) *Job {
	id := args.JobID
	if id == "" {
		id = newJobID()
	}
	args.JobID = "" // (the id is the job's, not part of its spec)
	j := &Job{
		m: m, id: id, spec: args,
		done: make(chan struct{}), killNow: make(chan struct{}), wsem: make(chan struct{}, 1),
		runDone: make(chan struct{}), runStarted: make(chan struct{}),
		createdAt: m.now(), out: newRing(m.cfg.RingBytes), attempt: 1,
	}
	if args.Restart.Enabled() {
		// A service runs until stopped: no overall timeout unless asked
		// for (then it bounds each run).
		j.svc = lifecycle.NewBackoff(*args.Restart)
		j.life.Service = true
	} else {
		j.timeout = m.cfg.DefaultTimeout
	}
	j.watchdog = time.Duration(args.WatchdogIntervalMs) * time.Millisecond
	if args.TimeoutMs > 0 {
		j.timeout = time.Duration(args.TimeoutMs) * time.Millisecond
	}
	if args.NoOutputTimeoutMs > 0 {
		j.noOutput = time.Duration(args.NoOutputTimeoutMs) * time.Millisecond
	}
	j.grace = m.cfg.Grace
	if args.GraceMs > 0 {
		j.grace = time.Duration(args.GraceMs) * time.Millisecond
	}
	return j
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
	ev, err := protocol.NewEvent(j.id, j.seq, ms(j.m.now()), kind, payload)
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
	if j.svc != nil {
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
		rebuilt, err := protocol.NewEvent(j.id, ev.Seq, ev.Ts, ev.Kind, j.startedPayload(j.pid, ev.Attempt))
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
	n := len(j.spec.Name) + len(j.spec.Shell) + len(j.spec.Cwd) + len(j.spec.SessionID) + len(j.errMsg) + len(j.notifyStatus)
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
