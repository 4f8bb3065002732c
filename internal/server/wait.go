package server

import (
	"context"
	"sync"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Held replies: a spawn with waitMs and the wait op answer once the job
// has finished (or the wait ran out). The reply is held outside the
// request workers and the in-flight bounds, which a wait must not occupy
// (a client waiting for a job could not kill it otherwise), their number
// bounded in all and per peer (see holdReply).
const (
	defaultMaxHeldReplies     = 10000
	defaultMaxPeerHeldReplies = 1000
)

// heldReply is what dispatch returns for a request whose reply waits for
// a job to finish.
type heldReply struct {
	id   string // the request's
	job  *jobs.Job
	done <-chan struct{}
	wait time.Duration
}

// heldCounts counts held replies, in all and per peer, and indexes them
// by peer and request id for cancel.
type heldCounts struct {
	mu    sync.Mutex
	total int
	peers map[*zmtp.Peer]int
	byID  map[heldKey][]*heldEntry
	// pending are the requests that may be held (spawn, wait) handed to a
	// worker and neither answered nor held yet. Requests on a connection
	// are handled concurrently, so a cancel may overtake the wait it
	// cancels: it marks the pending request, which then starts nothing
	// (a spawn not started yet) or is given up as soon as it is held. At
	// most MaxInFlight (they hold an in-flight slot).
	pending map[heldKey]*pendingReq
}

// pendingReq is a request under pending's key: n of them in flight (ids
// should be unique; a client may still reuse one), whether a cancel came,
// and the job it started or waits for, once known.
type pendingReq struct {
	n         int
	cancelled bool
	jobID     string
	// starting is closed once a spawn under this key has started its job
	// (or failed to): a cancel waits for it, to name the job.
	starting chan struct{}
}

// startingPending is called by a spawn about to start its job: cancelled
// says a cancel came for it already (it must start nothing); otherwise
// done must be called once the start is over, with the job's id ("" if it
// failed).
func (s *Server) startingPending(k heldKey) (cancelled bool, done func(jobID string)) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	pr := h.pending[k]
	if pr == nil {
		return false, func(string) {}
	}
	if pr.cancelled {
		return true, nil
	}
	ch := make(chan struct{})
	pr.starting = ch
	return false, func(jobID string) {
		h.mu.Lock()
		if jobID != "" {
			pr.jobID = jobID
		}
		h.mu.Unlock()
		close(ch)
	}
}

// startWait bounds how long a cancel waits for the spawn it cancels to
// have started its job (to name it): as long as pkg/client waits for the
// cancel's reply (its abandonWait). A cancel handled on the connection's
// reader never waits: while the spawn starts, its request is in flight on
// the same connection, so the cancel is not alone (see incoming).
const startWait = time.Second

// notePending counts a request that may be held as in flight (see
// heldCounts.pending).
func (s *Server) notePending(k heldKey) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending == nil {
		h.pending = map[heldKey]*pendingReq{}
	}
	pr := h.pending[k]
	if pr == nil {
		pr = &pendingReq{}
		h.pending[k] = pr
	}
	pr.n++
}

// clearPending ends what notePending began (the request was answered or
// held).
func (s *Server) clearPending(k heldKey) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if pr := h.pending[k]; pr != nil {
		if pr.n--; pr.n <= 0 {
			delete(h.pending, k)
		}
	}
}

// pendingJob records the job a pending request started or waits for, and
// reports whether a cancel came for it already.
func (s *Server) pendingJob(k heldKey, jobID string) (cancelled bool) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	pr := h.pending[k]
	if pr == nil {
		return false
	}
	if jobID != "" {
		pr.jobID = jobID
	}
	return pr.cancelled
}

type heldKey struct {
	p  *zmtp.Peer
	id string
}

// heldEntry is one held reply as cancel sees it: drop gives it up
// (reporting false if it was settled already).
type heldEntry struct {
	drop  func() bool
	jobID string
}

// indexHeld makes a held reply cancellable, and reports whether a cancel
// overtook it (see heldCounts.pending): it must be given up then.
func (s *Server) indexHeld(k heldKey, e *heldEntry) (cancelled bool) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byID == nil {
		h.byID = map[heldKey][]*heldEntry{}
	}
	h.byID[k] = append(h.byID[k], e)
	pr := h.pending[k]
	return pr != nil && pr.cancelled
}

func (s *Server) unindexHeld(k heldKey, e *heldEntry) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	es := h.byID[k]
	for i, x := range es {
		if x == e {
			es = append(es[:i], es[i+1:]...)
			break
		}
	}
	if len(es) == 0 {
		delete(h.byID, k)
	} else {
		h.byID[k] = es
	}
}

// cancelHeld gives up the replies held for request id of peer p (its own
// only): they are never sent. It reports whether one was held, and for
// which job.
func (s *Server) cancelHeld(p *zmtp.Peer, id string) (bool, string) {
	k := heldKey{p, id}
	s.held.mu.Lock()
	pr := s.held.pending[k]
	var starting chan struct{}
	if pr != nil {
		// (also) one a worker has and has not held yet: marked, it is
		// given up once held, or starts nothing
		pr.cancelled = true
		starting = pr.starting
	}
	s.held.mu.Unlock()
	if starting != nil { // (a spawn starting its job: name it)
		t := time.NewTimer(startWait)
		select {
		case <-starting:
		case <-t.C:
		}
		t.Stop()
	}
	cancelled, job := false, ""
	s.held.mu.Lock()
	es := append([]*heldEntry(nil), s.held.byID[k]...)
	if pr != nil {
		cancelled, job = true, pr.jobID
	}
	s.held.mu.Unlock()
	for _, e := range es {
		if e.drop() {
			cancelled, job = true, e.jobID
		}
	}
	return cancelled, job
}

// reserveHeld counts one more held reply for p, or says why not.
func (s *Server) reserveHeld(p *zmtp.Peer) error {
	all, one := s.cfg.MaxHeldReplies, s.cfg.MaxPeerHeldReplies
	if all <= 0 {
		all = defaultMaxHeldReplies
	}
	if one <= 0 {
		one = defaultMaxPeerHeldReplies
	}
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.total >= all:
		return protocol.Errorf(protocol.CodeTooManyWaits, "%d waits are held already (the limit); wait again later or follow the job's events", all)
	case h.peers[p] >= one:
		return protocol.Errorf(protocol.CodeTooManyWaits, "this connection holds %d waits already (the limit); wait again later or follow the job's events", one)
	}
	if h.peers == nil {
		h.peers = map[*zmtp.Peer]int{}
	}
	h.total++
	h.peers[p]++
	p.Hold() // (never evicted as idle while a wait is held)
	return nil
}

// heldWaits is the number of replies held for waits.
func (s *Server) heldWaits() int {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	return s.held.total
}

func (s *Server) releaseHeld(p *zmtp.Peer) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total--
	if h.peers[p]--; h.peers[p] <= 0 {
		delete(h.peers, p)
	}
	p.Unhold()
}

// spawnAndWait spawns a job (args.WaitMs > 0) and holds the reply until
// it has finished. The held reply is reserved first: a spawn that could
// not be waited for is refused before it starts anything.
func (s *Server) spawnAndWait(p *zmtp.Peer, id string, a protocol.SpawnArgs) (_ any, err error) {
	cancelled, started := s.startingPending(heldKey{p, id})
	if cancelled {
		return nil, protocol.Errorf(protocol.CodeCancelled, "cancelled before it was handled: nothing was started")
	}
	jobID := ""
	defer func() { started(jobID) }()
	if err := s.reserveHeld(p); err != nil {
		return nil, err
	}
	held := false
	defer func() {
		if !held { // (an error, or a panic that handle turns into one)
			s.releaseHeld(p)
		}
	}()
	wait := time.Duration(a.WaitMs) * time.Millisecond
	a.WaitMs = 0 // (a property of this request, not of the job)
	j, _, err := s.jobs.SpawnJobWith(s.spawnOptions(p, &a))
	if err != nil {
		return nil, err
	}
	jobID = j.ID() // (a cancel names it)
	held = true
	return &heldReply{job: j, done: j.Done(), wait: wait}, nil
}

// wait serves OpWait.
func (s *Server) wait(p *zmtp.Peer, req *protocol.Request, a *protocol.WaitArgs) (any, error) {
	switch {
	case a.JobID == "":
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "wait needs jobId")
	case a.WaitMs < 0 || a.WaitMs > protocol.MaxWaitMs:
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "waitMs is %d; it must be 0..%d (1 hour; 0 means %d)", a.WaitMs, int64(protocol.MaxWaitMs), int64(protocol.DefaultWaitMs))
	}
	if a.WaitMs == 0 {
		a.WaitMs = protocol.DefaultWaitMs
	}
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	if s.pendingJob(heldKey{p, req.ID}, j.ID()) {
		return nil, protocol.Errorf(protocol.CodeCancelled, "cancelled before it was handled")
	}
	if j.Finished() {
		return protocol.SpawnResult{JobID: j.ID(), Job: s.jobs.InfoWithUsage(j), Finished: true}, nil
	}
	done := j.Done()
	if err := s.reserveHeld(p); err != nil {
		return nil, err
	}
	return &heldReply{job: j, done: done, wait: time.Duration(a.WaitMs) * time.Millisecond}, nil
}

// holdReply answers w once the job has finished or w's wait ran out,
// without a goroutine of its own (one per held reply cost a goroutine
// start and a wake-up per waited-for job). The finished answer is sent by
// the goroutine that finishes the job, right after its terminal event
// (Job.AfterDone: no hand-off on the way from the process's exit to the
// reply); the wait running out is a timer's; the peer going away and the
// server stopping give the reply up (callbacks on the peer and on the
// server's context; jobs are ended before the server stops, so waits are
// answered then). Called from a request task, which holds reqWG: it grows
// here until the reply is settled.
func (s *Server) holdReply(p *zmtp.Peer, env [][]byte, w *heldReply) {
	s.reqWG.Add(1)
	env = cloneFrames(env) // (it outlives the request's buffers)
	var (
		mu      sync.Mutex
		settled bool
		stops   []func() bool // what else could settle it
		indexed bool          // for cancel (see below)
	)
	key, entry := heldKey{p, w.id}, &heldEntry{jobID: w.job.ID()}
	// settle claims the reply (once) and stops the rest. It does not
	// cancel AfterDone: it may run under the job's lock, in AfterDone.
	settle := func() bool {
		mu.Lock()
		if settled {
			mu.Unlock()
			return false
		}
		settled = true
		fs, wasIndexed := stops, indexed
		stops = nil
		mu.Unlock()
		if wasIndexed {
			s.unindexHeld(key, entry)
		}
		for _, stop := range fs {
			stop()
		}
		return true
	}
	answer := func(info protocol.JobInfo, finished bool) {
		r := protocol.SpawnResult{JobID: w.job.ID(), Job: info, Finished: finished}
		b, err := protocol.OKReply(w.id, r)
		if err != nil {
			b = protocol.ErrorReply(w.id, protocol.Errorf(protocol.CodeInternal, "encode reply: %v", err))
		}
		// Released before the reply goes: a client that got it may hold
		// a new wait at once.
		s.releaseHeld(p)
		s.reply(p, env, b)
		s.reqWG.Done()
	}
	cancel, pending := w.job.AfterDone(func(info protocol.JobInfo) {
		if settle() {
			answer(info, true)
		}
	})
	if !pending || over(w.done) {
		// Finished meanwhile; or the period the wait began in ended
		// before AfterDone (a service may already run again): that is
		// the answer.
		if pending {
			cancel()
		}
		if settle() {
			answer(s.jobs.InfoWithUsage(w.job), true)
		}
		return
	}
	drop := func() bool {
		if !settle() {
			return false
		}
		cancel()
		s.releaseHeld(p)
		s.reqWG.Done()
		return true
	}
	entry.drop = drop
	giveUp := func() { drop() }
	// Cancellable by the peer from now (unless it was settled already).
	mu.Lock()
	early := false
	if !settled {
		early = s.indexHeld(key, entry)
		indexed = true
	}
	mu.Unlock()
	if early {
		drop() // (a cancel came while a worker had it: see heldCounts.pending)
		return
	}
	t := time.AfterFunc(w.wait, func() {
		if !settle() {
			return
		}
		cancel()
		// (if it finished just now, its answer went first: this one is
		// not sent)
		answer(s.jobs.InfoWithUsage(w.job), over(w.done))
	})
	fs := []func() bool{t.Stop, p.OnGone(giveUp), context.AfterFunc(s.ctx, giveUp)}
	mu.Lock()
	if !settled {
		stops = fs
		mu.Unlock()
		return
	}
	mu.Unlock()
	for _, stop := range fs { // settled meanwhile: none of them may fire now
		stop()
	}
}

func over(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func cloneFrames(fs [][]byte) [][]byte {
	out := make([][]byte, len(fs))
	for i, f := range fs {
		out[i] = append([]byte{}, f...)
	}
	return out
}
