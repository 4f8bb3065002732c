package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/notify"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

const sigKill = syscall.SIGKILL

// Terminal sequences that turn bracketed paste on and off.
var bpOn, bpOff = []byte("\x1b[?2004h"), []byte("\x1b[?2004l")

// bpEdgeLen is what a read keeps of its end to find a bracketed-paste
// sequence split between it and the next.
const bpEdgeLen = 7

// trackBracketedPasteLocked follows whether the program asked for
// bracketed paste, from its output p (one read), a sequence split between
// reads included (it was missed).
func (j *Job) trackBracketedPasteLocked(p []byte) {
	var edge [2 * bpEdgeLen]byte
	e := append(append(edge[:0], j.bpEdge[:j.bpEdgeN]...), p[:min(len(p), bpEdgeLen)]...)
	// (a sequence across the edge comes before any wholly in p)
	if on, off := bytes.LastIndex(e, bpOn), bytes.LastIndex(e, bpOff); on >= 0 || off >= 0 {
		j.bracketed = on > off
	}
	if on, off := bytes.LastIndex(p, bpOn), bytes.LastIndex(p, bpOff); on >= 0 || off >= 0 {
		j.bracketed = on > off
	}
	if len(p) >= bpEdgeLen {
		j.bpEdgeN = copy(j.bpEdge[:], p[len(p)-bpEdgeLen:])
	} else {
		all := append(append(edge[:0], j.bpEdge[:j.bpEdgeN]...), p...)
		j.bpEdgeN = copy(j.bpEdge[:], all[max(len(all)-bpEdgeLen, 0):])
	}
}

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
	// state only moves through transition.
	state      State
	proc       *proc
	pid, pgid  int
	startTicks uint64

	createdAt, startedAt, endedAt, lastOutputAt time.Time
	updatedAt                                   time.Time // last state change

	// reason is the termination reason requested by a kill or timeout
	// before the leader exited; final after finalize.
	reason   Reason
	exitCode *int
	signal   string
	errMsg   string

	// killing is set by the first kill; killDeadline is when SIGKILL follows.
	killing       bool
	cleanupKilled bool   // SIGKILL was needed (counted once)
	pendingKill   Reason // a kill that arrived while Starting
	killDeadline  time.Time
	killNow       chan struct{} // closed to escalate to SIGKILL at once
	// leaderExited: the process was reaped; groupGone: its group is empty
	// too, so the pgid must never be signalled again (it may be reused).
	leaderExited bool
	// termLine is what the writes to a PTY job's terminal left of an
	// unfinished line (under wsem: see WriteInput).
	termLine int
	// svcFinN is a finished service's place in the order services
	// finished (0 while it is supervised: see Manager.finSvcs).
	svcFinN atomic.Uint64
	// leaderWS is how a one-shot job's leader ended, while the rest of
	// its group is terminated (journaled: see Snapshot.LeaderExit).
	leaderWS  *syscall.WaitStatus
	groupGone bool

	seq     uint64
	out     *ring
	offset  int64 // combined output offset of the next byte
	streamN [2]int64
	pending [2][]byte
	flushT  [2]*time.Timer
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
	// held at the reserve gate. gate, while output is held there, is
	// closed when it may be read again (see awaitGate).
	onDisk bool
	gate   chan struct{}
	// heldJournal: output is held for the journal (gatedLocked), as
	// reported (OutputHeld hook, outputHeld in status). pacers are the
	// clients that pace the job's output (see Pace).
	heldJournal bool
	pacers      map[any]*pacer
	// paceTimer, while output waits for a pacer, fires when the longest
	// silent pacer has stalled (see paceStalled).
	paceTimer *time.Timer
	paceGen   uint64 // (which paceTimer a firing is of)
	// unheldAt is when held output was last let go: the no-output
	// watchdog counts from it too (a held job was not quiet).
	unheldAt  time.Time
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

	// lastCPU and lastSampled are the previous resource sample (for CPU%).
	lastCPU     float64
	lastSampled time.Time

	// Service jobs (restart policy): svc decides restarts; attempt is the
	// current run's number; runOffset the output offset where it began.
	svc       *backoff
	attempt   int
	restarts  int
	restartT  *time.Timer
	restartAt time.Time
	runOffset int64
	// restartReq: the run is being ended by the restart op; endReason: a
	// stop, kill or shutdown asked to end supervision.
	restartReq bool
	endReason  Reason
	history    []protocol.RunRecord

	// Notify jobs: the run's notify socket and what it was told.
	notifySock   *notify.Socket
	ready        bool
	notifyStatus string
	lastWatchdog time.Time
	stopping     bool
	watchdog     time.Duration
	watchdogT    *time.Timer
	limits       *protocol.LimitsInfo
	// restartGen tells a restart timer of an earlier delay from the
	// current one.
	restartGen uint64
	// finN is the job's place in the order jobs finished (guarded by the
	// Manager's mu; 0 until counted).
	finN uint64
	// createN is its place in the order jobs were created (or restored):
	// set before the job is visible, never changed.
	createN uint64
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
	j := &Job{
		m: m, id: newJobID(), spec: args,
		done: make(chan struct{}), killNow: make(chan struct{}), wsem: make(chan struct{}, 1),
		runDone: make(chan struct{}), runStarted: make(chan struct{}),
		createdAt: m.now(), out: newRing(m.cfg.RingBytes), attempt: 1,
	}
	if args.Restart.Enabled() {
		// A service runs until stopped: no overall timeout unless asked
		// for (then it bounds each run).
		j.svc = newBackoff(*args.Restart)
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
	return j.endedAt, j.state == Exited
}

// transition moves the state; an illegal move is a bug and is refused.
func (j *Job) transition(to State) error {
	if !canMove(j.state, to) {
		return fmt.Errorf("job %s: illegal transition %s -> %s", j.id, j.state, to)
	}
	if j.m.logDebug() { // (the attributes cost allocations even when not logged)
		j.m.log.Debug("job state", "job", j.id, "from", j.state.String(), "to", to.String())
	}
	j.state = to
	j.updatedAt = j.m.now()
	j.m.changed()
	return nil
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

// gateSeq and gateOff are where the reserve gate closes: three quarters
// of a reserve used since the last journal write that landed. A write
// was asked for at a quarter; a healthy journal lands it within a
// fraction of a second, so only a journal that cannot be written (a full
// disk) lets a job get here.
const (
	gateSeq = seqReserve / 4 * 3
	gateOff = offsetReserve / 4 * 3
)

// gatedLocked says whether the job's output must not be read now: the
// journal lags too far behind (journalHeldLocked), or a client pacing
// the job has not taken its output that far (pacedLocked). Reading goes
// on once neither holds, or once the run's leader has exited (what is
// left to read then is bounded: the pipes' contents and what the group
// writes before it is cleared).
func (j *Job) gatedLocked() bool {
	return !j.leaderExited && (j.journalHeldLocked() || j.pacedLocked())
}

// journalHeldLocked says whether output must wait for the journal: a
// successor that finds the job in the journal numbers its later events
// and output from seqSnap+seqReserve and offSnap+offsetReserve on (see
// Restore), so the job must never publish that far while the journal
// cannot be written. Its output is held instead: the child blocks on its
// full pipe or terminal, as under any slow reader, and nothing is lost.
// Reading goes on when a journal write lands (Journaled).
func (j *Job) journalHeldLocked() bool {
	return j.onDisk && (j.seq >= j.seqSnap+gateSeq || j.offset >= j.offSnap+gateOff)
}

// pacer is a client pacing a job's output: it has taken the output up to
// acked, and the job's output is read no further than acked + the pace
// window (see Pace). stop ends the watch that releases it.
type pacer struct {
	acked int64
	// holdingSince is when the job was first seen waiting for this pacer
	// since acked last moved (zero: not holding it): a pacer that holds
	// the job for PaceStallLimit without taking more has stalled (see
	// armPaceStallLocked). A quiet job's pacer holds nothing, however
	// long since it last took output.
	holdingSince time.Time
	stop         func() bool
}

// PaceWindow is how far past what its slowest pacer took a paced job's
// output is read, at most: half the ring buffer, so that all of it is
// still retained for a pacer that missed it live (its event connection
// cut, say) and backfills. Less for a job whose output comes in small
// events (see paceWindowLocked).
func (m *Manager) PaceWindow() int64 { return int64(m.cfg.RingBytes / 2) }

// minPaceWindow is the least a paced job is let run ahead of its pacer.
const minPaceWindow = 4 << 10

// paceWindowLocked is PaceWindow in output bytes the ring can actually
// hold: its budget counts each event's encoding and bookkeeping too, so
// a job printing in small events fits less output in it (a 1-byte event
// costs ~130 bytes). Scaled by what the retained output costs.
func (j *Job) paceWindowLocked() int64 {
	w := j.m.PaceWindow()
	if r := j.out; r.cost > 0 && r.bytes < r.cost {
		w = int64(float64(w) * float64(r.bytes) / float64(r.cost))
	}
	return max(w, min(minPaceWindow, j.m.PaceWindow()/2))
}

// pacedLocked says whether a pacer holds the job's output.
func (j *Job) pacedLocked() bool {
	if len(j.pacers) == 0 {
		return false
	}
	w := j.paceWindowLocked()
	for _, p := range j.pacers {
		if j.heldByLocked(p, w) {
			return true
		}
	}
	return false
}

// heldByLocked says whether pacer p holds the job (window w): the job
// read a window past what p took.
func (j *Job) heldByLocked(p *pacer, w int64) bool { return j.offset >= p.acked+w }

// Pace makes owner (a client connection, say) pace the job's output, or
// moves its pace on: owner has taken the output up to offset, and the
// job's output is read no further than offset + the pace window (see
// paceWindowLocked) until owner takes more, as a pipe's writer waits for its reader (nothing is lost,
// the child waits). When owner is new, watch (if not nil) is called with
// a function that releases owner, for when owner goes away; it returns
// a function that ends that watch (called when owner is released). A
// finished job has nothing to pace (no error). Release with Unpace.
func (j *Job) Pace(owner any, offset int64, watch func(release func()) (stop func() bool)) error {
	if offset < 0 {
		return protocol.Errorf(protocol.CodeInvalidArgument, "offset %d is negative", offset)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state == Exited {
		return nil
	}
	// (offsets a resumed service skipped hold nothing to take)
	if n := len(j.out.skips); n > 0 {
		offset = max(offset, j.out.skips[n-1].At+j.out.skips[n-1].N)
	}
	// Nobody took more than was read: an offset past it (a client's
	// mistake) would hold the job at a window it can never reach, and no
	// later pace could move it back.
	offset = min(offset, j.offset)
	p := j.pacers[owner]
	if p == nil {
		if j.pacers == nil {
			j.pacers = map[any]*pacer{}
		}
		p = &pacer{acked: offset}
		j.pacers[owner] = p
		if watch != nil {
			p.stop = watch(func() { j.Unpace(owner) })
		}
	}
	if offset > p.acked {
		p.acked, p.holdingSince = offset, time.Time{}
	}
	j.openGateLocked()
	return nil
}

// armPaceStallLocked makes sure a pacer that holds the job is let go once
// it has taken nothing for PaceStallLimit (see paceStalled): called while
// the job's output waits for a pacer.
func (j *Job) armPaceStallLocked() {
	limit := j.m.cfg.PaceStallLimit
	if limit <= 0 || j.gate == nil {
		return
	}
	// Which pacers hold the job now, since when; the timer is for the
	// one holding it longest.
	now, w := j.m.now(), j.paceWindowLocked()
	var first time.Time
	for _, p := range j.pacers {
		if !j.heldByLocked(p, w) {
			p.holdingSince = time.Time{}
			continue
		}
		if p.holdingSince.IsZero() {
			p.holdingSince = now
		}
		if first.IsZero() || p.holdingSince.Before(first) {
			first = p.holdingSince
		}
	}
	if first.IsZero() || j.paceTimer != nil {
		return // (none holds it; or a timer is due no later than this one)
	}
	j.paceGen++
	gen := j.paceGen
	j.paceTimer = time.AfterFunc(max(first.Add(limit).Sub(j.m.now()), 0), func() { j.paceStalled(gen) })
}

// paceStalled releases the pacers that hold the job and have taken
// nothing for PaceStallLimit: a follower that stopped reading (a
// suspended terminal, a wedged client) holds a job for that long at most,
// whoever's the job is. Logged and counted; the follower finds out
// through the output it then misses (a gap), never silently.
func (j *Job) paceStalled(gen uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if gen != j.paceGen || j.gate == nil {
		return // (a timer stopped too late, or the gate opened meanwhile)
	}
	j.paceTimer = nil
	limit, now, w := j.m.cfg.PaceStallLimit, j.m.now(), j.paceWindowLocked()
	for owner, p := range j.pacers {
		if !j.heldByLocked(p, w) || p.holdingSince.IsZero() || now.Sub(p.holdingSince) < limit {
			continue
		}
		delete(j.pacers, owner)
		if p.stop != nil {
			p.stop()
		}
		j.m.log.Warn("job pacer let go: it took none of the job's output for too long (--pace-stall-limit); the job runs on, and what leaves the ring before that follower reads it is a gap for it",
			"job", j.id, "took", p.acked, "outputEnd", j.offset, "stalledFor", now.Sub(p.holdingSince).Round(time.Millisecond))
		if h := j.m.hooks.PaceStalled; h != nil {
			h()
		}
	}
	j.openGateLocked()
	if j.gate != nil {
		j.armPaceStallLocked()
	}
}

// Unpace releases owner's pace of the job (a no-op when it has none).
func (j *Job) Unpace(owner any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if p := j.pacers[owner]; p != nil {
		delete(j.pacers, owner)
		if p.stop != nil {
			p.stop()
		}
		j.openGateLocked()
	}
}

// clearPacersLocked releases every pacer (the job is over).
func (j *Job) clearPacersLocked() {
	for owner, p := range j.pacers {
		delete(j.pacers, owner)
		if p.stop != nil {
			p.stop()
		}
	}
	j.openGateLocked()
}

// gated is gatedLocked for a caller without the lock.
func (j *Job) gated() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.gatedLocked()
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// awaitGate returns once the job's output may be read (see gatedLocked).
func (j *Job) awaitGate() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.gatedLocked() {
		if j.gate == nil {
			j.gate = make(chan struct{})
		}
		j.noteHeldLocked()
		j.armPaceStallLocked()
		g := j.gate
		j.mu.Unlock()
		<-g
		j.mu.Lock()
	}
}

// openGateLocked lets held output be read again once it may be (and
// otherwise keeps what is reported of why it is held right).
func (j *Job) openGateLocked() {
	if j.gate == nil {
		return
	}
	if j.gatedLocked() {
		j.noteHeldLocked()
		j.armPaceStallLocked() // (a pacer may hold it now: it did not when the gate closed)
		return
	}
	close(j.gate)
	j.gate = nil
	if j.paceTimer != nil {
		j.paceTimer.Stop()
		j.paceTimer = nil
	}
	for _, p := range j.pacers {
		p.holdingSince = time.Time{} // (nobody holds an open gate: a service's next run starts the clock afresh)
	}
	j.unheldAt = j.m.now()
	j.noteHeldLocked()
}

// noteHeldLocked reports (log, OutputHeld hook, status) whether held
// output is held for the journal, when that changed.
func (j *Job) noteHeldLocked() {
	held := j.gate != nil && j.journalHeldLocked()
	if held == j.heldJournal {
		return
	}
	j.heldJournal = held
	if held {
		j.m.log.Warn("job output held: the journal has not been written for too long (disk full?); the job blocks on its output until a write lands",
			"job", j.id, "seq", j.seq, "journaledSeq", j.seqSnap, "outputEnd", j.offset, "journaledOutputEnd", j.offSnap)
	} else {
		j.m.log.Info("job output read again", "job", j.id, "journaledSeq", j.seqSnap, "leaderExited", j.leaderExited)
	}
	if h := j.m.hooks.OutputHeld; h != nil {
		h(held)
	}
}

// nextSeqLocked numbers the job's next event.
func (j *Job) nextSeqLocked() {
	j.seq++
	j.checkReserveLocked()
}

// checkReserveLocked asks for a journal write when a quarter of the seq
// or offset reserve is used.
func (j *Job) checkReserveLocked() {
	if !j.reserveAsked && (j.seq >= j.seqSnap+seqReserve/4 || j.offset >= j.offSnap+offsetReserve/4) {
		j.reserveAsked = true
		if h := j.m.hooks.Changed; h != nil {
			h() // (never blocks)
		}
	}
}

// lookPath resolves file like a shell would, in the job's PATH.
func lookPath(file, path string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if path == "" {
		return "", fmt.Errorf("executable %s not found: the job's environment has no PATH (replaced without one?); give its full path, or set PATH", quoteClip(file))
	}
	return "", fmt.Errorf("executable %s not found in PATH", quoteClip(file))
}

// buildEnv returns the job's environment. With nothing to change it is
// the supervisor's own slice, shared: it must not be modified (setEnv
// copies). With a mark (WithMark) the job's mark is set last, replacing
// any value inherited or given.
func (j *Job) buildEnv() []string {
	mark := j.m.mark
	if len(j.spec.Env) == 0 && j.spec.EnvMode != protocol.EnvReplace {
		if mark == "" {
			return j.m.environ
		}
		base := j.m.environUnmarked
		return append(base[:len(base):len(base)], EnvJobID+"="+j.id, EnvStateID+"="+mark)
	}
	var env []string
	if j.spec.EnvMode != protocol.EnvReplace {
		for _, kv := range j.m.environ {
			k, _, _ := strings.Cut(kv, "=")
			if _, over := j.spec.Env[k]; !over && (mark == "" || !isMarkVar(k)) {
				env = append(env, kv)
			}
		}
	}
	for k, v := range j.spec.Env {
		if mark == "" || !isMarkVar(k) {
			env = append(env, k+"="+v)
		}
	}
	if mark != "" {
		env = append(env, EnvJobID+"="+j.id, EnvStateID+"="+mark)
	}
	return env
}

func envLookup(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// start launches the current run's process. On failure the run ends as a
// spawn-error (the job is finalized unless a service restarts it) and the
// error is returned.
func (j *Job) start() error {
	argv := j.spec.Argv
	if j.spec.Shell != "" {
		argv = []string{"/bin/sh", "-c", j.spec.Shell}
	}
	j.mu.Lock()
	attempt, runDone, runStarted := j.attempt, j.runDone, j.runStarted
	service := j.svc != nil
	j.mu.Unlock()
	if h := j.m.hooks.BeforeServiceRun; h != nil && service && attempt > 1 {
		h(j.id)
	}
	env := j.buildEnv()
	var err error
	if j.spec.Notify {
		env, err = j.openNotify(env, runDone, runStarted)
	}
	var l *launch
	files := noFiles(false)
	if err == nil {
		l, files, err = j.prepare(argv, env)
	}
	if err == nil && j.m.cgroups != nil {
		// Born in its own cgroup (never moved after start): everything it
		// ever starts stays in it, whatever groups or sessions it makes.
		// An empty cgroup of a finished job is reused unless limits go on it.
		var cg *cgroups.Cgroup
		var cgfd int
		if cg, cgfd, err = j.m.cgroups.Acquire(j.hasCgroupLimits()); err == nil {
			j.applyCgroupLimits(cg)
			j.mu.Lock()
			j.cg = cg
			j.mu.Unlock()
			l.sys.UseCgroupFD = true
			l.sys.CgroupFD = cgfd
		}
	} else if err == nil {
		j.noCgroupLimits()
	}
	var p *proc
	if err == nil {
		// The reaper must not see this leader's zombie before it is known.
		j.m.reapMu.RLock()
		p, err = l.start(j.m.pidfds, j.m.tickNanos.Load(), j.m.forkAround)
		if err != nil {
			err = fmt.Errorf("start %s: %w", quoteClip(argv[0]), err)
		} else {
			j.m.addLeader(p.pid)
		}
		j.m.reapMu.RUnlock()
	}
	// The child has its copies; ours of its ends must go so that EOF
	// arrives when the child's side closes. Except the output pipes' write
	// ends when runLoop waits for this run: it keeps them until the
	// process has exited (see runLoop).
	held := [2]int{-1, -1}
	if err == nil && j.runLoops(files, p) {
		held, files.outW = files.outW, [2]int{-1, -1}
	}
	files.closeChild()
	if err != nil {
		j.mu.Lock()
		cg := j.cg
		j.mu.Unlock()
		if cg != nil {
			_ = j.m.cgroups.Release(cg, true, time.Second) // nothing ever ran in it
			j.mu.Lock()
			j.cg = nil
			j.mu.Unlock()
		}
		files.closeParent()
		j.mu.Lock()
		if j.stdin != nil {
			j.stdin.Close()
			j.stdin = nil
		}
		j.mu.Unlock()
		// (kept, logged and sent back: its message may quote input)
		err = clipErr(err)
		j.failSpawn(err)
		return err
	}

	if p.startTicks != 0 && !j.m.startTicksTrusted(p) {
		p.startTicks = 0
	}
	j.mu.Lock()
	j.proc = p
	j.pid = p.pid
	// The process fingerprint, when the boot clock gave it (else the
	// first snapshot of the running job reads it: fingerprintLocked).
	j.startTicks = p.startTicks
	j.pgid = p.pid // Setpgid with Pgid 0 (or Setsid): the leader's pid
	j.startedAt = j.m.now()
	j.lastOutputAt = j.startedAt
	_ = j.transition(Running)
	close(runStarted)
	started := j.emitLocked(protocol.KindStarted, j.startedPayload(j.pid, j.attemptTag()))
	if j.startedEv == nil && started.Seq == 1 {
		j.startedEv = &started
	} else {
		// (a later run's; or a restored job's whose first start is not
		// known: Events keeps these in seq order among the others)
		j.keepExtraLocked(started)
	}
	if j.timeout > 0 {
		j.overallT = time.AfterFunc(j.timeout, func() { j.killRun(runDone, protocol.ReasonOverallTimeout) })
	}
	if j.noOutput > 0 {
		j.idleT = time.AfterFunc(j.noOutput, func() { j.idleFired(runDone) })
	}
	if j.watchdog > 0 {
		j.watchdogT = time.AfterFunc(j.watchdog, func() { j.watchdogFired(runDone) })
	}
	if j.m.logInfo() { // (the attributes cost allocations even when not logged)
		// Before its output and exit are read (so before they are
		// logged). (argv and cwd are client input of up to a request's
		// size: the line shows their beginning.)
		j.m.log.Info("job started", "job", j.id, "pid", j.pid, "argv", logArgv(argv), "cwd", Clip(j.spec.Cwd, LogArgBytes), "attempt", attempt,
			"timeout", j.timeout, "noOutputTimeout", j.noOutput)
	}
	j.readersDone = make(chan struct{})
	if j.runLoops(files, p) {
		// One goroutine reads both pipes and reaps it (see runLoop).
		out := files.out
		j.m.wg.Add(1)
		j.m.runners.run(func() { j.runLoop(p, out, held) })
	} else {
		readers := files.parent // a terminal's master: stream 0
		if files.pipes {
			readers = []*os.File{newOutFile(files.out[0], 0), newOutFile(files.out[1], 1)}
		}
		j.startReaders(readers)
		j.m.wg.Add(1)
		j.m.runners.run(j.waitLoop)
	}
	if j.cg != nil {
		j.m.watchEscapes(j, runDone)
	}
	pending := j.pendingKill
	j.mu.Unlock()
	if h := j.m.hooks.Started; h != nil {
		h(j)
	}
	if pending != "" {
		_, _ = j.kill(runDone, pending, 0)
	}
	return nil
}

// attemptTag is the attempt number events carry: the run number for
// service jobs, 0 (absent) for one-shot jobs.
func (j *Job) attemptTag() int {
	if j.svc == nil {
		return 0
	}
	return j.attempt
}

// killRun ends the run whose runDone is given with reason, unless that
// run is already over (a timer of an old run firing late).
func (j *Job) killRun(runDone <-chan struct{}, reason Reason) {
	_, _ = j.kill(runDone, reason, 0)
}

func ptr[T any](v T) *T { return &v }

// procFiles are the descriptors of one start: the child's ends (closed
// once it has them) and ours.
type procFiles struct {
	childFds   []int      // pipe ends of the child's stdio
	childFiles []*os.File // the terminal's slave side
	parent     []*os.File // the terminal's master
	// out are the read ends of the stdout and stderr pipes, when pipes is
	// set (not for a terminal): non-blocking plain descriptors, read by
	// runLoop or made *os.File (in Go's netpoller) for readLoop.
	out [2]int
	// outW are the child's ends of those pipes, when pipes is set.
	outW  [2]int
	pipes bool
}

// noFiles is a start's procFiles before any descriptor is made (pipes:
// for a start with output pipes, not a terminal).
func noFiles(pipes bool) procFiles {
	return procFiles{out: [2]int{-1, -1}, outW: [2]int{-1, -1}, pipes: pipes}
}

// closeParent closes our ends (a start that failed).
func (f *procFiles) closeParent() {
	for _, p := range f.parent {
		p.Close()
	}
	for i, fd := range f.out {
		if f.pipes && fd >= 0 {
			syscall.Close(fd)
			f.out[i] = -1
		}
	}
	f.parent = nil
}

// newOutFile makes stream i's pipe read end an *os.File for readLoop.
func newOutFile(fd, i int) *os.File {
	return os.NewFile(uintptr(fd), "|"+string(streams[i]))
}

// startReaders starts a readLoop for each of files, files[i] being
// stream i's (nil: none), and makes them the run's rfiles.
func (j *Job) startReaders(files []*os.File) {
	j.rfiles = nil
	for _, f := range files {
		if f != nil {
			j.rfiles = append(j.rfiles, f)
		}
	}
	j.readersLeft.Store(int32(len(j.rfiles)))
	if len(j.rfiles) == 0 {
		close(j.readersDone) // (nothing to read)
		return
	}
	j.m.wg.Add(len(j.rfiles))
	done := j.readersDone
	for i, f := range files {
		if f != nil {
			j.m.runners.run(func() { j.readLoop(i, f, done) })
		}
	}
}

// closeChild closes our copies of the child's ends.
func (f *procFiles) closeChild() {
	for _, fd := range f.childFds {
		syscall.Close(fd)
	}
	for i, fd := range f.outW {
		if f.pipes && fd >= 0 {
			syscall.Close(fd)
			f.outW[i] = -1
		}
	}
	for _, c := range f.childFiles {
		c.Close()
	}
	f.childFds, f.childFiles = nil, nil
}

func (j *Job) prepare(argv, env []string) (*launch, procFiles, error) {
	files := noFiles(true)
	path, err := lookPath(argv[0], envLookup(env, "PATH"))
	if err != nil {
		return nil, files, err
	}
	if j.spec.Cwd != "" {
		fi, err := os.Stat(j.spec.Cwd)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) { // (its message repeats the path: the first bytes do)
				err = pe.Err
			}
			return nil, files, fmt.Errorf("working directory %s: %w", quoteClip(j.spec.Cwd), err)
		}
		if !fi.IsDir() {
			return nil, files, fmt.Errorf("working directory %s is not a directory", quoteClip(j.spec.Cwd))
		}
	}
	// Rlimits and niceness: the child applies them to itself, then execs.
	if path, argv, err = j.wrapLimits(path, argv); err != nil {
		return nil, files, err
	}
	if j.spec.Pty != nil {
		return j.preparePTY(path, argv, env)
	}
	l := &launch{path: path, argv: argv, env: env, dir: j.spec.Cwd, sys: &syscall.SysProcAttr{Setpgid: true}}
	l.stdio[0] = j.m.devNullFd
	if j.spec.Stdin {
		w, r, err := childPipe()
		if err != nil {
			return nil, files, fmt.Errorf("create stdin pipe: %w", err)
		}
		files.childFds = append(files.childFds, r)
		j.mu.Lock()
		j.stdin = w
		j.mu.Unlock()
		l.stdio[0] = r
	}
	for i := 1; i <= 2; i++ {
		r, w, err := outputPipe()
		if err != nil {
			files.closeChild()
			files.closeParent()
			j.mu.Lock()
			if j.stdin != nil {
				j.stdin.Close()
				j.stdin = nil
			}
			j.mu.Unlock()
			return nil, files, fmt.Errorf("create output pipe: %w", err)
		}
		files.out[i-1] = r
		files.outW[i-1] = w
		l.stdio[i] = w
	}
	return l, files, nil
}

// childPipe makes a pipe for a child's stdin and returns our end (the
// write end), non-blocking and in the netpoller so that writes can time
// out and be interrupted, and the child's end, a plain blocking
// descriptor (only handed to the child and closed: no *os.File, no poller
// registration).
func childPipe() (ours *os.File, child int, err error) {
	r, w, err := pipe(1)
	if err != nil {
		return nil, -1, err
	}
	return os.NewFile(uintptr(w), "|stdin"), r, nil
}

// outputPipe makes a pipe for a child's stdout or stderr: our end (the
// read end) a non-blocking plain descriptor, the child's a blocking one.
func outputPipe() (ours, child int, err error) {
	return pipe(0)
}

// pipe makes a pipe with end nb (0 read, 1 write) non-blocking.
func pipe(nb int) (r, w int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return -1, -1, fmt.Errorf("pipe: %w", err)
	}
	// Only O_NONBLOCK among the status flags F_SETFL changes is set on a
	// new pipe: no need to read them first.
	if _, err := unix.FcntlInt(uintptr(p[nb]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return -1, -1, fmt.Errorf("pipe: %w", err)
	}
	return p[0], p[1], nil
}

// openPTY opens a terminal pair. The master is non-blocking and in Go's
// netpoller, like a pipe's end: pty.Open leaves it in blocking mode
// (it calls Fd), where a write deadline never fires, so a write to a
// program that does not read its terminal blocked for good (holding the
// job's write lock, which kept the job from ever finishing).
func openPTY() (ptmx, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		if err = unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		tty.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}

// setWinsize sets the terminal's size through its master (without Fd,
// which would make it blocking again).
func setWinsize(ptmx *os.File, rows, cols uint16) error {
	rc, err := ptmx.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ioErr
}

// preparePTY sets up a terminal: the child gets the slave side as stdin,
// stdout and stderr, in a session of its own with it as controlling tty.
func (j *Job) preparePTY(path string, argv, env []string) (*launch, procFiles, error) {
	files := noFiles(false)
	ptmx, tty, err := openPTY()
	if err != nil {
		return nil, files, fmt.Errorf("open pty: %w", err)
	}
	rows, cols := uint16(j.spec.Pty.Rows), uint16(j.spec.Pty.Cols) // (1..10000 or 0: Validate)
	j.mu.Lock()
	if j.rows > 0 && j.cols > 0 {
		rows, cols = j.rows, j.cols // a service's next run: the size it was last given (resize)
	}
	j.mu.Unlock()
	if rows == 0 {
		rows = 24
	}
	if cols == 0 {
		cols = 80
	}
	if err := setWinsize(ptmx, rows, cols); err != nil {
		ptmx.Close()
		tty.Close()
		return nil, files, fmt.Errorf("size pty: %w", err)
	}
	// TERM: an explicit env entry wins, else pty.term, else xterm-256color
	// (over whatever the supervisor inherited).
	if _, explicit := j.spec.Env["TERM"]; !explicit {
		term := j.spec.Pty.Term
		if term == "" {
			term = "xterm-256color"
		}
		env = setEnv(env, "TERM", term)
	}
	j.mu.Lock() // the job is already visible to status and the journal
	j.isPTY, j.ptmx, j.rows, j.cols = true, ptmx, rows, cols
	j.mu.Unlock()
	files.childFiles = []*os.File{tty}
	files.parent = []*os.File{ptmx}
	fd := int(tty.Fd())
	l := &launch{path: path, argv: argv, env: env, dir: j.spec.Cwd, stdio: [3]int{fd, fd, fd},
		sys: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}}
	return l, files, nil
}

func (j *Job) failSpawn(err error) {
	j.mu.Lock()
	j.reason = protocol.ReasonSpawnError
	j.errMsg = err.Error()
	j.endedAt = j.m.now()
	close(j.runStarted)
	close(j.runDone)
	sock := j.notifySock
	j.notifySock = nil
	// A service keeps trying when a later run cannot start (a binary
	// being replaced, a full disk); the first start reports the error.
	if j.svc != nil && j.attempt > 1 && j.afterRunLocked() {
		j.mu.Unlock()
		closeNotify(sock)
		j.m.log.Warn("service run could not start; restarting", "job", j.id, "err", err)
		return
	}
	if j.svc != nil && j.attempt > 1 {
		j.finishLocked()
		j.mu.Unlock()
		closeNotify(sock)
		j.m.log.Warn("service run could not start", "job", j.id, "err", err)
		return
	}
	_ = j.transition(Exited)
	j.m.jobDone(j, protocol.ReasonSpawnError) // counted before anyone can see it ended
	j.exitEv = ptr(j.emitLocked(protocol.KindFailed, j.withEndLocked(protocol.ExitPayload{Reason: j.reason, Error: j.errMsg})))
	j.closeDoneLocked()
	j.mu.Unlock()
	closeNotify(sock)
	j.m.log.Warn("job spawn failed", "job", j.id, "err", err)
}

func (j *Job) readLoop(i int, f *os.File, done chan struct{}) {
	defer j.m.wg.Done()
	defer func() {
		if j.readersLeft.Add(-1) == 0 {
			close(done)
		}
	}()
	for {
		j.awaitGate()
		buf, start := j.readBuf(i)
		n, err := f.Read(buf[start:cap(buf)])
		if n > 0 {
			j.output(i, buf, start, n)
		}
		if err != nil {
			if !j.isPTY {
				// Closed here, off the way from the exit to the exit
				// event (drain's Close is then free). A terminal's
				// master also carries input: drain closes it.
				f.Close()
			}
			return
		}
	}
}

// readBuf returns stream i's merge buffer and where the next read goes
// in it: output is read straight into it, behind the room for the event
// header, so that a busy stream's output becomes event payloads without
// being copied.
func (j *Job) readBuf(i int) (buf []byte, start int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	buf = j.pending[i]
	if buf == nil {
		buf = j.m.getOutBuf()
		j.pending[i] = buf
	}
	if len(buf) == cap(buf) { // full (flushes happen before): hand it on
		j.flushInOrderLocked(i)
		if buf = j.pending[i]; buf == nil {
			buf = j.m.getOutBuf()
			j.pending[i] = buf
		}
	}
	return buf, len(buf)
}

// output takes n bytes that a read put at buf[start:] (buf being stream
// i's merge buffer when the read began).
func (j *Job) output(i int, buf []byte, start, n int) {
	if h := j.m.hooks.OutputBytes; h != nil {
		h(streams[i], n)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	cur := j.pending[i]
	if cur != nil && len(cur) == start && &cur[:cap(cur)][0] == &buf[:cap(buf)][0] {
		cur = cur[:start+n]
	} else {
		// The merge timer flushed while this read ran: the new bytes sit
		// behind output already sent; move them into a buffer of their own.
		if cur == nil {
			cur = j.m.getOutBuf()
		}
		cur = append(cur, buf[start:start+n]...)
	}
	j.pending[i] = cur
	if len(cur)-protocol.OutputHeadroom == n { // the first since the last flush
		j.pendingN++
		j.pendingSince[i] = j.pendingN
	}
	p := cur[len(cur)-n:]
	j.lastOutputAt = j.m.now()
	j.streamN[i] += int64(n)
	if j.idleT != nil && j.state != Exited {
		j.idleT.Reset(j.noOutput)
	}
	if j.isPTY {
		j.trackBracketedPasteLocked(p)
	}
	if len(cur)-protocol.OutputHeadroom >= j.m.cfg.MergeMaxBytes || j.m.cfg.MergeInterval <= 0 {
		j.flushInOrderLocked(i)
		return
	}
	if j.flushT[i] == nil {
		j.flushT[i] = time.AfterFunc(j.m.cfg.MergeInterval, func() {
			j.mu.Lock()
			j.flushT[i] = nil
			j.flushInOrderLocked(i)
			j.mu.Unlock()
		})
	}
}

// flushInOrderLocked flushes stream i, after the other stream if that
// one's pending output was read first.
func (j *Job) flushInOrderLocked(i int) {
	if o := 1 - i; len(j.pending[o]) > protocol.OutputHeadroom && j.pendingSince[o] < j.pendingSince[i] {
		j.flushLocked(o)
	}
	j.flushLocked(i)
}

// flushLocked turns stream i's pending output into one event (of at most
// MergeMaxBytes). A large one is sent without a copy: its buffer becomes
// the event's payload (and the ring's chunk) and the stream gets a new
// one; a small one is copied into an event of its own size, and the
// buffer is reused.
func (j *Job) flushLocked(i int) {
	if j.state == Exited {
		return
	}
	if t := j.flushT[i]; t != nil {
		t.Stop()
		j.flushT[i] = nil
	}
	cur := j.pending[i]
	n := len(cur) - protocol.OutputHeadroom
	if n <= 0 {
		return
	}
	j.nextSeqLocked()
	var ev protocol.Event
	if n >= j.m.cfg.MergeMaxBytes/2 {
		ev = protocol.NewOutputEventInPlace(j.id, j.seq, ms(j.m.now()), streams[i].Kind(), j.offset, cur)
		j.pending[i] = nil
	} else {
		ev = protocol.NewOutputEvent(j.id, j.seq, ms(j.m.now()), streams[i].Kind(), j.offset, cur[protocol.OutputHeadroom:])
		j.pending[i] = cur[:protocol.OutputHeadroom]
	}
	ev.Attempt = j.attemptTag()
	if j.m.sink != nil {
		j.m.sink.Publish(ev)
	}
	// The ring's chunk aliases the payload's tail: the only copy kept.
	stored := ev.Payload[len(ev.Payload)-n:]
	j.out.add(chunk{Chunk: protocol.Chunk{Seq: ev.Seq, Stream: streams[i], Offset: j.offset, Data: stored}, ts: ev.Ts, payload: ev.Payload, attempt: ev.Attempt})
	j.offset += int64(n)
	j.checkReserveLocked()
}

func (j *Job) idleFired(runDone <-chan struct{}) {
	j.mu.Lock()
	if j.state != Running || over(runDone) {
		j.mu.Unlock()
		return
	}
	if j.gate != nil {
		// Output held (journal, pacing): the job waits for us, it is not
		// quiet. Counted again from when it is read.
		j.idleT.Reset(j.noOutput)
		j.mu.Unlock()
		return
	}
	if quiet := j.m.now().Sub(laterOf(j.lastOutputAt, j.unheldAt)); quiet < j.noOutput {
		// Output arrived while the timer fired: re-arm for the rest.
		j.idleT.Reset(j.noOutput - quiet)
		j.mu.Unlock()
		return
	}
	j.mu.Unlock()
	j.killRun(runDone, protocol.ReasonNoOutputTimeout)
}

// Kill requests termination with reason. sig 0 or SIGTERM takes the
// termination path: SIGTERM to the group, grace, SIGKILL to the group.
// SIGKILL kills the group at once. Repeated kills are idempotent (a SIGKILL
// escalates a pending grace). It reports whether the job had already finished.
func (j *Job) Kill(reason Reason, sig syscall.Signal) (alreadyFinished bool, err error) {
	return j.kill(nil, reason, sig)
}

// kill is Kill restricted to the run whose runDone is given (nil: any).
func (j *Job) kill(runDone <-chan struct{}, reason Reason, sig syscall.Signal) (alreadyFinished bool, err error) {
	j.mu.Lock()
	if runDone != nil && over(runDone) {
		j.mu.Unlock()
		return false, nil
	}
	if j.svc != nil && endsSupervision(reason) && j.endReason == "" {
		j.endReason = reason
		j.m.changed() // (journaled as the pending end: a crash now must not resume it)
	}
	if j.state == Restarting && !endsSupervision(reason) {
		j.mu.Unlock()
		return false, nil // a timeout or watchdog of a run that is over
	}
	if j.state == Restarting {
		// Between runs: nothing to signal; supervision ends here (the
		// last run's end is in the history, not in this fate).
		j.exitCode, j.signal, j.errMsg = nil, "", ""
		j.finishLocked()
		j.mu.Unlock()
		j.m.log.Info("service stopped while waiting to restart", "job", j.id, "reason", string(j.reason))
		return false, nil
	}
	defer j.mu.Unlock()
	switch j.state {
	case Exited:
		return true, nil
	case Starting:
		// start() is between registration and the process start: it
		// kills the job as soon as the process exists.
		if j.pendingKill == "" {
			j.pendingKill = reason
		}
		return false, nil
	}
	if sig == sigKill && j.killing {
		j.escalateLocked()
		// Sent here too, not only by the goroutine waiting out the grace
		// period: a supervisor whose shutdown gave up waiting (Close)
		// exits right after asking for this.
		if !j.leaderExited || !j.groupGone {
			if err := j.signalLocked(sigKill); err != nil {
				j.m.log.Warn("job kill signal", "job", j.id, "err", err)
			}
		}
		return false, nil
	}
	if j.killing {
		return false, nil
	}
	j.killing = true
	if !j.leaderExited {
		j.reason = reason
		_ = j.transition(Exiting)
	}
	j.killDeadline = j.m.now().Add(j.grace)
	first := syscall.SIGTERM
	if sig == sigKill {
		first = sigKill
		close(j.killNow)
	}
	j.m.log.Info("job kill", "job", j.id, "reason", string(reason), "signal", protocol.SignalName(first), "grace", j.grace)
	if err := j.signalLocked(first); err != nil {
		j.m.log.Warn("job kill signal", "job", j.id, "err", err)
	}
	if first != sigKill { // (a stopped process acts on SIGTERM once continued)
		_ = j.signalLocked(syscall.SIGCONT)
	}
	if first != sigKill {
		j.m.wg.Add(1)
		go j.escalateAfterGrace(j.runDone, j.killNow, j.grace, j.isPTY)
	}
	return false, nil
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
	case <-j.killNow:
	default:
		close(j.killNow)
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
			if !over(runDone) {
				_ = j.signalLocked(syscall.SIGHUP)
				_ = j.signalLocked(syscall.SIGCONT)
			}
			j.mu.Unlock()
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
	if err := j.signalLocked(sigKill); err != nil {
		j.m.log.Warn("job kill signal", "job", j.id, "err", err)
	}
	first, mode := j.markCleanupKillLocked()
	j.mu.Unlock()
	j.countCleanupKill(first, mode)
}

// markCleanupKillLocked records that the job needed SIGKILL and reports
// whether this is the first time (each job is counted once).
func (j *Job) markCleanupKillLocked() (first bool, mode string) {
	first = !j.cleanupKilled
	j.cleanupKilled = true
	return first, j.ownership()
}

func (j *Job) countCleanupKill(first bool, mode string) {
	if h := j.m.hooks.CleanupKill; h != nil && first {
		h(mode)
	}
}

// Signal delivers sig to the job's process group without starting the
// termination path.
func (j *Job) Signal(sig syscall.Signal) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch j.state {
	case Exited:
		return protocol.Errorf(protocol.CodeInvalidArgument, "job %s has already exited", j.id)
	case Starting, Restarting:
		// No process of this job runs now (the previous run's cgroup may
		// already serve another job).
		return protocol.Errorf(protocol.CodeInvalidArgument, "job %s has no running process right now (%s)", j.id, j.state)
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
	if j.cg != nil {
		// Every member is ours by construction, even one that escaped.
		if sig == syscall.SIGKILL {
			_ = j.cg.Kill()
		} else {
			j.cg.Signal(sig)
		}
		if j.leaderExited {
			return nil
		}
	}
	if j.groupGone || j.pgid <= 1 {
		return nil
	}
	if j.isPTY {
		// A terminal session may hold several process groups (job control).
		return signalSession(j.pgid, sig)
	}
	return signalGroup(j.pgid, sig)
}

// scopeAlive reports whether anything of the job still runs: its process
// group, or for a PTY job its whole session.
func (j *Job) scopeAlive() bool {
	if j.cg != nil {
		return j.cg.Populated()
	}
	if j.isPTY {
		return sessionAlive(j.pgid)
	}
	return groupAlive(j.pgid)
}

// waitLoop waits for the process of a run read by readLoops (a
// terminal's, or one without a pidfd), then finishes the run
// (afterReap). Each run's process is waited for in one place: here or in
// runLoop.
func (j *Job) waitLoop() {
	defer j.m.wg.Done()
	p := j.proc // (a service's next run gets a proc of its own)
	ws, err := p.wait()
	j.afterReap(p, ws, err)
}

// runLoops reports whether a run started with files as p is read and
// waited for by runLoop: its output is in pipes and it has a pidfd.
func (j *Job) runLoops(files procFiles, p *proc) bool {
	return files.pipes && p.pidfd != nil && !j.m.noRunLoop
}

// runLoop is the one goroutine of a run with output pipes and a pidfd:
// it reads both pipes as they become readable and reaps the process once
// its pidfd does, waiting for all three at once in the netpoller (see
// pollSet), then finishes the run as waitLoop does. Against two readers
// and a waiter, a job that prints little costs no goroutine hand-offs
// (each of which woke an idle thread: measured as what most of the
// supervisor's time per /bin/true went to), and no *os.File per pipe.
//
// A round reads at most one pipe's worth per stream, so that a stream
// that never runs dry (a descendant flooding it) neither keeps the other
// stream waiting nor the exit from being seen. Pipes still open once the
// process has exited and what it wrote before has been read (a descendant
// holds them) go to readLoops, which read on while the rest of the group
// is cleared, and drain waits for them as it does for any run.
//
// held are our copies of the pipes' write ends, kept open until the
// process has exited (or the pipes are handed off): the end of a process
// closes its descriptors before it makes its pidfd readable, so without
// them each exit woke it three times (each pipe's end, then the exit),
// each time taking the CPU from the exiting process, where with them it
// wakes once, to find the pipes ended already.
func (j *Job) runLoop(p *proc, out, held [2]int) {
	defer j.m.wg.Done()
	release := func() {
		for i, fd := range held {
			if fd >= 0 {
				syscall.Close(fd)
				held[i] = -1
			}
		}
	}
	defer release()
	pidfd := p.rawfd
	fds := [3]unix.PollFd{
		{Fd: int32(out[0]), Events: unix.POLLIN},
		{Fd: int32(out[1]), Events: unix.POLLIN},
		{Fd: int32(pidfd), Events: unix.POLLIN},
	}
	open := 2
	closeOut := func(i int) {
		syscall.Close(out[i])
		out[i], fds[i].Fd = -1, -1 // (poll skips a negative fd)
		open--
	}
	// done closes the pollSet once it is of no more use (not left open,
	// woken by the readers' pipes, through the group's clearing).
	var ps *pollSet
	done := func() {
		if ps != nil {
			ps.close()
			ps = nil
		}
	}
	defer done()
	// handOff gives the pipes still open to readLoops (which close
	// readersDone when they are done).
	handedOff := false
	handOff := func() {
		done()
		release() // (else they never end)
		handedOff = true
		var files [2]*os.File
		for i := range 2 {
			if out[i] >= 0 {
				files[i] = newOutFile(out[i], i)
				out[i], fds[i].Fd = -1, -1
			}
		}
		j.startReaders(files[:])
	}
	err := j.m.pollSetErr // (tests)
	if err == nil {
		ps, err = newPollSet(fds[:])
	}
	if err != nil {
		// (EMFILE, say.) The netpoller's readers take the pipes; the wait
		// below reaps the process.
		msg := "wait for job output and exit; reading it through readers (later failures are logged at debug level)"
		if j.m.pollSetFailed.Swap(true) {
			j.m.log.Debug(msg, "job", j.id, "err", err)
		} else {
			j.m.log.Error(msg, "job", j.id, "err", err)
		}
		handOff()
	}
	polling := !handedOff
	for polling {
		if j.gated() {
			// Output held (see gatedLocked): the readLoops wait at the
			// gate, the exit is waited for below.
			handOff()
			break
		}
		if err := ps.wait(fds[:]); err != nil {
			// (ENOMEM, in practice.) The netpoller's readers take the
			// pipes; the wait below reaps the process.
			j.m.log.Error("poll job output; reading it through readers", "job", j.id, "err", err)
			handOff()
			break
		}
		for i := range 2 {
			if fds[i].Fd >= 0 && fds[i].Revents != 0 && j.readAvailable(i, out[i], pipeRound) {
				closeOut(i)
			}
		}
		// (pidfd readable: it exited; both pipes at EOF: it closed
		// them, only its exit is left to wait for.)
		polling = fds[2].Revents == 0 && open > 0
	}
	release() // (its exit, or a hand-off, was seen: what follows reads to EOF)
	if !handedOff {
		exited := fds[2].Revents != 0
		if !exited {
			// The pipes ended first: the exit is waited for in poll too,
			// so that the job knows its leader exited before it is reaped.
			pidOnly := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			exited = ps.wait(pidOnly) == nil && pidOnly[0].Revents != 0
		}
		done()
		if exited {
			// A zombie now: its pid (and so the group number) is still
			// taken. From here on a kill signals a cgroup job through its
			// cgroup only: once reaped, the group number may be anyone's.
			j.mu.Lock()
			j.leaderExited = true
			j.openGateLocked()
			j.mu.Unlock()
		}
	}
	ws, err := p.wait()
	if !handedOff {
		// What it wrote before it exited is in the pipes (at most a
		// pipe's worth each; more means a descendant is writing).
		for i := range 2 {
			if out[i] >= 0 && j.readAvailable(i, out[i], pipeRound) {
				closeOut(i)
			}
		}
		if open > 0 {
			handOff()
		} else {
			close(j.readersDone)
		}
	}
	j.afterReap(p, ws, err)
}

// pipeRound bounds what runLoop reads of one stream per round: a pipe's
// default capacity.
const pipeRound = 64 << 10

// readAvailable reads stream i's pipe (non-blocking descriptor fd) until
// it would block or max bytes have been read, as readLoop does; it
// reports true at EOF or on an error (the stream is over).
func (j *Job) readAvailable(i, fd, max int) bool {
	for n := 0; n < max; {
		buf, start := j.readBuf(i)
		k, err := unix.Read(fd, buf[start:cap(buf)])
		if k > 0 {
			j.output(i, buf, start, k)
			n += k
			continue
		}
		switch err {
		case unix.EAGAIN:
			return false
		case unix.EINTR:
			continue
		case nil: // EOF
		default:
			j.m.log.Warn("read job output", "job", j.id, "stream", string(streams[i]), "err", err)
		}
		return true
	}
	return false
}

// afterReap is what follows the reaping of the run's process (p, exit
// status ws): what is left of its scope is cleared, the output drained,
// the run finalized.
func (j *Job) afterReap(p *proc, ws syscall.WaitStatus, err error) {
	j.m.removeLeader(p.pid)
	if err != nil {
		j.m.log.Error("wait for job", "job", j.id, "err", err)
	}
	j.mu.Lock()
	j.leaderExited = true
	j.openGateLocked()
	killing, deadline, cg, runDone := j.killing, j.killDeadline, j.cg, j.runDone
	j.mu.Unlock()

	// Usually nothing is left once the leader is gone: one check of the
	// scope then (no escape can hide in an empty cgroup).
	empty := true
	if j.scopeAlive() {
		if j.svc == nil {
			// Ending the rest may take the grace period: how the leader
			// ended is journaled meanwhile, so that a supervisor crash
			// then does not lose it.
			j.mu.Lock()
			j.leaderWS = &ws
			j.mu.Unlock()
			j.m.changed()
		}
		j.detectEscapes(runDone)
		empty = j.clearGroup(killing, deadline)
	} else {
		j.markGroupGone()
	}
	j.drain()
	sock := j.finalize(ws)
	// The pidfd is closed after the exit event is out (unreaped is not
	// asked once leaderExited is set; a signal through it after the reap
	// fails, it cannot reach another process).
	p.release()
	closeNotify(sock)
	// The cgroup is empty (clearGroup waited for it); removing it need
	// not delay the job's end. (A service's next run has its own.)
	if cg != nil {
		if err := j.m.cgroups.Release(cg, empty, 5*time.Second); err != nil {
			j.m.log.Error("job cgroup not removed", "job", j.id, "err", err)
		}
	}
}

// clearGroup terminates descendants that outlived the leader: a job owns
// its whole process group, and nothing it started may live on unowned. It
// reports whether the scope was seen empty.
func (j *Job) clearGroup(killing bool, deadline time.Time) bool {
	if j.m.reaping {
		// Members that lost their parent are the subreaper's children:
		// once the group is gone, their zombies are reaped at once, not
		// at the reaper's next pass. (Zombies never count as alive.)
		defer j.m.reapZombies()
	}
	if !j.scopeAlive() {
		j.markGroupGone()
		return true
	}
	if !killing {
		j.m.log.Info("job leader exited; terminating the rest of its process group", "job", j.id, "pgid", j.pgid)
		j.mu.Lock()
		_ = j.signalLocked(syscall.SIGTERM)
		_ = j.signalLocked(syscall.SIGCONT) // (as in kill)
		j.mu.Unlock()
		deadline = j.m.now().Add(j.grace)
	}
	if !waitGone(j.scopeAlive, time.Until(deadline), j.killNow) {
		j.mu.Lock()
		_ = j.signalLocked(sigKill)
		first, mode := j.markCleanupKillLocked()
		j.mu.Unlock()
		j.countCleanupKill(first, mode)
		if !waitGone(j.scopeAlive, 5*time.Second, nil) {
			j.m.log.Error("process group survived SIGKILL", "job", j.id, "pgid", j.pgid)
			j.markGroupGone()
			return false
		}
	}
	j.markGroupGone()
	return true
}

func (j *Job) markGroupGone() {
	j.mu.Lock()
	j.groupGone = true
	j.mu.Unlock()
}

// waitGroupGone waits until group pgid is empty, for at most d or until
// stop is closed.
func waitGroupGone(pgid int, d time.Duration, stop <-chan struct{}) bool {
	return waitGone(func() bool { return groupAlive(pgid) }, d, stop)
}

// waitGone waits until alive reports false, for at most d or until stop
// is closed. There is no kernel notification for an empty process group,
// so it checks with a short, growing period.
func waitGone(alive func() bool, d time.Duration, stop <-chan struct{}) bool {
	deadline := time.Now().Add(d)
	period := time.Millisecond
	for {
		if !alive() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		t := time.NewTimer(min(period, left))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return !alive()
		}
		period = min(period*2, 50*time.Millisecond)
	}
}

// drain waits for the output readers to reach EOF. A process that escaped
// the group may hold a pipe open; after DrainTimeout the pipes are closed.
func (j *Job) drain() {
	j.mu.Lock()
	ch := j.readersDone
	j.mu.Unlock()
	select {
	case <-ch: // the usual case: EOF came with the exit
		for _, f := range j.rfiles {
			f.Close()
		}
		return
	default:
	}
	t := time.NewTimer(j.m.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		j.m.log.Warn("job output pipes still open after its process group ended (a process escaped the group); closing them", "job", j.id)
		for _, f := range j.rfiles {
			f.Close()
		}
		<-ch
	}
	for _, f := range j.rfiles {
		f.Close()
	}
}

// finalize records the run's end. A service whose policy restarts it
// goes to Restarting; otherwise the job is finalized. It returns the
// run's notify socket for the caller to close.
func (j *Job) finalize(ws syscall.WaitStatus) *notify.Socket {
	j.mu.Lock()
	stdin := j.stdin
	j.stdin = nil
	j.mu.Unlock()
	if stdin != nil {
		stdin.Close() // (a write in progress fails at once)
	}
	j.mu.Lock()
	j.flushInOrderLocked(0) // (both, oldest first)
	for i := range j.pending {
		j.flushLocked(i)
		if b := j.pending[i]; b != nil { // the readers are gone: reuse it
			j.m.putOutBuf(b)
			j.pending[i] = nil
		}
	}
	for _, t := range []*time.Timer{j.overallT, j.idleT, j.watchdogT} {
		if t != nil {
			t.Stop()
		}
	}
	j.overallT, j.idleT, j.watchdogT = nil, nil, nil
	j.exitCode, j.signal = exitOf(ws)
	if j.reason == "" {
		if ws.Signaled() {
			j.reason = protocol.ReasonSignal
		} else {
			j.reason = protocol.ReasonExit
		}
	}
	j.endedAt = j.m.now()
	close(j.runDone)
	sock := j.notifySock
	j.notifySock = nil
	var attrs []any
	logInfo := j.m.logInfo()
	if logInfo || j.svc != nil {
		attrs = []any{"job", j.id, "pid", j.pid, "reason", string(j.reason), "signal", j.signal,
			"duration", j.endedAt.Sub(j.startedAt), "stdoutBytes", j.streamN[0], "stderrBytes", j.streamN[1]}
		if j.exitCode != nil {
			attrs = append(attrs, "exitCode", *j.exitCode)
		}
	}
	if j.svc != nil {
		attrs = append(attrs, "attempt", j.attempt)
		if j.afterRunLocked() {
			delay := j.restartAt.Sub(j.m.now()).Round(time.Millisecond)
			j.mu.Unlock()
			j.m.log.Warn("service run ended; restarting", append(attrs, "delay", delay)...)
			return sock
		}
	}
	j.finishLocked()
	reason := j.reason
	j.mu.Unlock()
	if j.svc != nil {
		attrs = append(attrs, "finalReason", string(reason))
	}
	if logInfo {
		j.m.log.Info("job exited", attrs...)
	}
	return sock
}

// finishLocked finalizes the job: state Exited, the terminal event, done
// closed. For a service the reason is the one that ended supervision.
func (j *Job) finishLocked() {
	if j.svc != nil && j.endReason != "" {
		j.reason = j.endReason
	}
	if t := j.restartT; t != nil {
		t.Stop()
		j.restartT = nil
	}
	if err := j.transition(Exited); err != nil {
		j.m.log.Error("finalize", "err", err)
	}
	// Counted (active jobs, finished metric) before anyone can see it
	// ended (status, the terminal event, done): a client that saw the end
	// and then scrapes /metrics finds it counted.
	j.m.jobDone(j, j.reason)
	kind := protocol.KindFailed
	if j.reason == protocol.ReasonExit {
		kind = protocol.KindExited
	}
	j.exitEv = ptr(j.emitLocked(kind, j.withEndLocked(protocol.ExitPayload{
		Reason: j.reason, ExitCode: j.exitCode, Signal: j.signal, Error: j.errMsg,
		DurationMs: j.endedAt.Sub(j.startedAt).Milliseconds(),
	})))
	j.closeDoneLocked()
}

// withEndLocked fills in p the job's output end, byte counts and times as
// of its end (what a terminal event carries of its final info).
func (j *Job) withEndLocked(p protocol.ExitPayload) protocol.ExitPayload {
	p.OutputEnd, p.EndedAt, p.LastOutputAt = j.offset, ms(j.endedAt), ms(j.lastOutputAt)
	p.StdoutBytes, p.StderrBytes = j.streamN[0], j.streamN[1]
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

// Info returns a snapshot of the job.
func (j *Job) Info() protocol.JobInfo {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.infoLocked()
}

func (j *Job) infoLocked() protocol.JobInfo {
	info := protocol.JobInfo{
		JobID: j.id, State: j.state.Wire(), Argv: j.spec.Argv, Shell: j.spec.Shell, Cwd: j.spec.Cwd,
		Labels: j.spec.Labels, SessionID: j.spec.SessionID, Pid: j.pid, Pgid: j.pgid,
		CreatedAt: ms(j.createdAt), StartedAt: ms(j.startedAt), EndedAt: ms(j.endedAt), LastOutputAt: ms(j.lastOutputAt),
		ExitCode: j.exitCode, Signal: j.signal, Error: j.errMsg,
		TimeoutMs: j.timeout.Milliseconds(), NoOutputTimeoutMs: j.noOutput.Milliseconds(),
		StdoutBytes: j.streamN[0], StderrBytes: j.streamN[1],
		RetainedFrom: j.out.from(), OutputEnd: j.offset, LastSeq: j.seq,
		Pty: j.isPTY, Rows: j.rows, Cols: j.cols, BracketedPaste: j.bracketed, Ownership: j.ownership(),
		Cgroup:     j.cgroupPath(),
		StdinOpen:  j.state != Exited && j.state != Restarting && (j.stdin != nil || j.isPTY && j.ptmx != nil),
		OutputHeld: j.heldJournal, OutputPaced: j.gate != nil && j.pacedLocked(),
	}
	if j.state == Exited {
		info.Reason = j.reason
	}
	j.serviceInfoLocked(&info)
	return info
}

// Poll returns retained output from cursor (a combined output offset).
func (j *Job) Poll(cursor, maxBytes int64) (protocol.PollResult, error) {
	if maxBytes <= 0 || maxBytes > protocol.MaxPollBytes {
		maxBytes = protocol.MaxPollBytes
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if cursor > j.offset {
		return protocol.PollResult{}, protocol.Errorf(protocol.CodeInvalidArgument,
			"cursor %d is past the end of the job's output (%d bytes so far)", cursor, j.offset)
	}
	res := j.out.poll(cursor, maxBytes)
	res.Job = j.infoLocked()
	return res, nil
}

// Events returns retained events with seq >= from, at most limit, and
// reports the seq ranges (and output bytes) no longer retained.
func (j *Job) Events(from uint64, limit int) (protocol.SubscribeResult, error) {
	if limit <= 0 || limit > protocol.MaxSubscribeEvents {
		limit = protocol.MaxSubscribeEvents
	}
	if from == 0 {
		from = 1
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	res := protocol.SubscribeResult{Job: j.infoLocked(), Events: []protocol.Event{}}
	size := 0
	next := from // the first seq not yet accounted for
	// add appends ev (seq >= from, in order); seqs skipped since the last
	// one are no longer retained and reported missing.
	add := func(ev protocol.Event) bool {
		if len(res.Events) >= limit || (len(res.Events) > 0 && size+len(ev.Payload) > protocol.MaxSubscribeBytes) {
			res.More = true
			return false
		}
		if ev.Seq > next {
			res.Missing = append(res.Missing, protocol.SeqRange{From: next, To: ev.Seq - 1})
		}
		next = ev.Seq + 1
		size += len(ev.Payload)
		res.Events = append(res.Events, ev)
		return true
	}
	// Retained events in seq order: job.started, then output chunks merged
	// with the other retained events (later runs' starts, restarts,
	// readiness, ownership escapes, earlier terminal events), then the
	// terminal event.
	var retained []protocol.Event
	if j.startedEv != nil && j.startedEv.Seq >= from {
		retained = append(retained, j.startedEventLocked())
	}
	extra := j.extraEvs
	for _, c := range j.out.live() {
		for len(extra) > 0 && extra[0].Seq < c.Seq {
			if extra[0].Seq >= from {
				retained = append(retained, extra[0])
			}
			extra = extra[1:]
		}
		if c.Seq < from {
			continue
		}
		ev := protocol.Event{V: protocol.Version, JobID: j.id, Seq: c.Seq, Ts: c.ts, Kind: c.Stream.Kind(), Attempt: c.attempt, Payload: c.payload}
		if ev.Payload == nil { // a chunk restored from the journal
			ev = protocol.NewOutputEvent(j.id, c.Seq, c.ts, c.Stream.Kind(), c.Offset, c.Data)
			ev.Attempt = c.attempt
		}
		retained = append(retained, ev)
		if len(retained) > limit {
			break // enough to fill the reply
		}
	}
	if len(retained) <= limit {
		for _, ev := range extra {
			if ev.Seq >= from {
				retained = append(retained, ev)
			}
		}
		if j.exitEv != nil && j.exitEv.Seq >= from {
			retained = append(retained, *j.exitEv)
		}
	}
	for _, ev := range retained {
		if !add(ev) {
			break
		}
	}
	if !res.More && len(retained) <= limit && next <= j.seq {
		res.Missing = append(res.Missing, protocol.SeqRange{From: next, To: j.seq})
	}
	if len(res.Missing) > 0 {
		// Exact from the eviction index; an upper bound (all evicted
		// output) only for ranges older than what the index keeps.
		res.MissingBytes, _ = j.out.missingBytes(res.Missing)
	}
	return res, nil
}

// Write sends data to the job's stdin pipe or terminal, then (eof) closes
// stdin or sends the terminal's EOF character. A program that does not
// read gets WriteTimeout: the bytes written so far are reported.
func (j *Job) Write(data []byte, eof bool) (int, error) { return j.WriteInput(data, eof, false) }

// WriteInput is Write; typed marks input a person types at a terminal
// (attach), which the line-mode limit cuts as a terminal does rather than
// refuses.
func (j *Job) WriteInput(data []byte, eof, typed bool) (int, error) {
	// One write at a time, each bounded by writeTimeout in all: a write
	// waiting behind one to a job that does not read its input gives up
	// with it, rather than adding 2 s per writer in line.
	if j.Finished() {
		return 0, protocol.Errorf(protocol.CodeInvalidArgument, "job %s has exited; nothing reads its input", j.id)
	}
	deadline := time.Now().Add(writeTimeout)
	wait := time.NewTimer(writeTimeout)
	select {
	case j.wsem <- struct{}{}:
		wait.Stop()
	case <-wait.C:
		return 0, protocol.Errorf(protocol.CodeInvalidArgument, "job %s is not reading its input: an earlier write to it was still waiting after %v (nothing of this one was written)", j.id, writeTimeout)
	}
	defer func() { <-j.wsem }()
	j.mu.Lock()
	state, f, isPTY := j.state, j.stdin, j.isPTY
	if isPTY {
		f = j.ptmx
	}
	j.mu.Unlock()
	if state == Exited {
		return 0, protocol.Errorf(protocol.CodeInvalidArgument, "job %s has exited; nothing reads its input", j.id)
	}
	if state == Starting || state == Restarting {
		// (a service between runs: the last run's input is closed, the
		// next one's not open yet)
		return 0, protocol.Errorf(protocol.CodeInvalidArgument, "job %s has no running process right now (%s); nothing reads its input", j.id, state)
	}
	if f == nil {
		if j.spec.Stdin {
			return 0, protocol.Errorf(protocol.CodeInvalidArgument, "job %s's stdin was closed (eof)", j.id)
		}
		return 0, protocol.Errorf(protocol.CodeInvalidArgument, "job %s has no stdin: spawn it with stdin: true (or pty)", j.id)
	}
	lineMode := isPTY && termLineMode(f)
	line := 0 // the terminal's unfinished line after data (as far as writes tell)
	if isPTY {
		var n int
		n, line = longestLine(j.termLine, data)
		if lineMode && !typed && n > maxTermLine {
			// The terminal's line discipline keeps 4095 bytes of a line
			// and drops the rest: the program would get another line
			// than the one sent (a shell, another command).
			return 0, protocol.Errorf(protocol.CodeInvalidArgument,
				"job %s's terminal is in line mode, which keeps at most %d bytes of a line, and this write makes a line of %d (with what earlier writes left unfinished): nothing was written (send it in a file or to a job with stdin: true; a program that reads its terminal raw, as readline does, takes longer lines)", j.id, maxTermLine, n)
		}
	}
	_ = f.SetWriteDeadline(deadline)
	n, err := f.Write(data)
	if isPTY {
		j.termLine = line
		if n < len(data) {
			j.termLine = 0 // (unknown: do not refuse on a guess)
		}
	}
	if err == nil && eof {
		if isPTY {
			eofs := []byte{4} // VEOF, Ctrl-D
			if lineMode && j.termLine > 0 {
				// (in line mode the first one only hands over the
				// unfinished line; the second is the end of input)
				eofs = []byte{4, 4}
			}
			j.termLine = 0
			_, err = f.Write(eofs)
		} else {
			if err = f.Close(); errors.Is(err, os.ErrClosed) {
				err = nil // (the job ended meanwhile, and its stdin was closed for it)
			}
			j.mu.Lock()
			j.stdin = nil
			j.mu.Unlock()
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, protocol.Errorf(protocol.CodeInvalidArgument, "job %s is not reading its input: %d of %d bytes written in %v", j.id, n, len(data), writeTimeout)
		}
		if inputGone(err) {
			// (its reading end is closed: the job closed its stdin, or
			// its run is ending; a terminal whose processes are gone)
			return n, protocol.Errorf(protocol.CodeInvalidArgument, "job %s no longer reads its input (%d of %d bytes written): %v", j.id, n, len(data), err)
		}
		return n, fmt.Errorf("write to job %s: %w", j.id, err)
	}
	return n, nil
}

// maxTermLine is the longest line a terminal in line (canonical) mode
// keeps (N_TTY_BUF_SIZE less the newline).
const maxTermLine = 4095

// termLineMode reports whether the terminal of master f is in line
// (canonical) mode, as most programs that do not use readline leave it.
func termLineMode(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	canon := false
	_ = rc.Control(func(fd uintptr) {
		if t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS); err == nil {
			canon = t.Lflag&unix.ICANON != 0
		}
	})
	return canon
}

// longestLine returns the length of the longest line data makes on a
// terminal whose unfinished line holds start bytes, and the unfinished
// line's length after it. A line ends at \n or \r (which the terminal
// turns into \n), and at Ctrl-C, Ctrl-D and Ctrl-U, which end or discard
// it.
func longestLine(start int, data []byte) (longest, after int) {
	cur := start
	longest = cur
	for _, b := range data {
		switch b {
		case '\n', '\r', 0x03, 0x04, 0x15:
			cur = 0
			continue
		}
		cur++
		longest = max(longest, cur)
	}
	return longest, cur
}

// inputGone reports whether err, from writing to a job's input or
// resizing its terminal, says that the other side is gone (a job that
// closed its stdin, a run ending): the client's request came too late,
// not a fault of the supervisor's.
func inputGone(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed) ||
		errors.Is(err, syscall.EBADF) || errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.ENXIO)
}

// writeTimeout bounds one write op to a job's input.
const writeTimeout = 2 * time.Second

// Resize changes a PTY job's terminal size; the kernel sends SIGWINCH to
// its foreground process group.
func (j *Job) Resize(rows, cols uint16) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.isPTY {
		return protocol.Errorf(protocol.CodeInvalidArgument, "job %s has no terminal (spawn it with pty)", j.id)
	}
	switch {
	case j.state == Exited:
		return protocol.Errorf(protocol.CodeInvalidArgument, "job %s has exited", j.id)
	case j.state == Starting || j.state == Restarting || j.ptmx == nil:
		return protocol.Errorf(protocol.CodeInvalidArgument, "job %s has no running process right now (%s)", j.id, j.state)
	}
	if err := setWinsize(j.ptmx, rows, cols); err != nil {
		if inputGone(err) {
			return protocol.Errorf(protocol.CodeInvalidArgument, "job %s's terminal is closing (its run is ending): %v", j.id, err)
		}
		return fmt.Errorf("resize job %s: %w", j.id, err)
	}
	j.rows, j.cols = rows, cols
	return nil
}

// cgroupPath is the current run's cgroup while it runs (a finished run's
// cgroup may already serve another job).
func (j *Job) cgroupPath() string {
	if j.cg == nil || j.state == Exited || j.state == Restarting {
		return ""
	}
	return j.cg.Path
}

func (j *Job) ownership() string {
	switch {
	case j.pid == 0:
		return ""
	case j.cg != nil:
		return "cgroup"
	}
	return "pgid"
}

// detectEscapes logs (and reports) processes of the job's cgroup that left
// its process group or session: they are still the job's and are ended
// with it, but a program doing this is worth knowing about.
func (j *Job) detectEscapes(runDone <-chan struct{}) {
	j.mu.Lock()
	cg, pgid, isPTY := j.cg, j.pgid, j.isPTY
	gone := over(runDone)
	j.mu.Unlock()
	if cg == nil || gone {
		return
	}
	var escaped []int
	for _, pid := range cg.Procs() {
		p, ok := LookupProcess(pid)
		if !ok {
			continue
		}
		if (isPTY && p.Sid != pgid) || (!isPTY && p.Pgid != pgid) {
			escaped = append(escaped, pid)
		}
	}
	if len(escaped) == 0 {
		return
	}
	j.mu.Lock()
	if over(runDone) {
		j.mu.Unlock()
		return
	}
	first := !j.escaped
	j.escaped = true
	if first && j.state != Exited {
		j.keepExtraLocked(j.emitLocked(protocol.KindOwnershipEscape, protocol.OwnershipEscapePayload{Pids: escaped}))
	}
	strict := j.spec.StrictOwnership && !j.leaderExited
	j.mu.Unlock()
	if !first {
		return
	}
	j.m.log.Warn("ownership escape: processes left the job's process group; its cgroup still holds them and they end with the job",
		"job", j.id, "pgid", pgid, "pids", escaped, "strict", j.spec.StrictOwnership)
	if h := j.m.hooks.OwnershipEscape; h != nil {
		h()
	}
	if strict {
		_, _ = j.kill(runDone, protocol.ReasonOwnershipEscape, 0)
	}
}

// watchEscapes has the escape watcher check the run (cgroup jobs only)
// every escapeCheckPeriod until it ends.
func (m *Manager) watchEscapes(j *Job, runDone <-chan struct{}) {
	m.emu.Lock()
	m.watched[j] = runDone
	m.emu.Unlock()
}

// escapeWatcher looks for escaped processes of every running cgroup job,
// once per escapeCheckPeriod (one goroutine for all jobs).
func (m *Manager) escapeWatcher() {
	defer m.wg.Done()
	t := time.NewTicker(escapeCheckPeriod)
	defer t.Stop()
	type run struct {
		j    *Job
		done <-chan struct{}
	}
	var runs []run
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		runs = runs[:0]
		m.emu.Lock()
		for j, done := range m.watched {
			if over(done) {
				delete(m.watched, j)
				continue
			}
			runs = append(runs, run{j, done})
		}
		m.emu.Unlock()
		for _, r := range runs {
			r.j.detectEscapes(r.done)
		}
	}
}

// escapeCheckPeriod is how often running cgroup jobs are checked for
// processes outside their group or session.
const escapeCheckPeriod = time.Second

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
	n := len(j.spec.Shell) + len(j.spec.Cwd) + len(j.spec.SessionID) + len(j.errMsg) + len(j.notifyStatus)
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
