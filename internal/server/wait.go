package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/zmqx"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Held replies: a spawn with waitMs and the wait op answer once the job
// has finished (or the wait ran out). The reply is held outside the
// request workers and the in-flight bounds, which a wait must not occupy
// (a client waiting for a job could not kill it otherwise): one goroutine
// per held reply, their number bounded in all and per peer.
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

// heldCounts counts held replies, in all and per peer.
type heldCounts struct {
	mu    sync.Mutex
	total int
	peers map[*zmqx.Peer]int
}

// reserveHeld counts one more held reply for p, or says why not.
func (s *Server) reserveHeld(p *zmqx.Peer) error {
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
		h.peers = map[*zmqx.Peer]int{}
	}
	h.total++
	h.peers[p]++
	return nil
}

// heldWaits is the number of replies held for waits.
func (s *Server) heldWaits() int {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	return s.held.total
}

func (s *Server) releaseHeld(p *zmqx.Peer) {
	h := &s.held
	h.mu.Lock()
	defer h.mu.Unlock()
	h.total--
	if h.peers[p]--; h.peers[p] <= 0 {
		delete(h.peers, p)
	}
}

// spawnAndWait spawns a job (args.WaitMs > 0) and holds the reply until
// it has finished. The held reply is reserved first: a spawn that could
// not be waited for is refused before it starts anything.
func (s *Server) spawnAndWait(p *zmqx.Peer, a protocol.SpawnArgs) (_ any, err error) {
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
	j, _, err := s.jobs.SpawnJob(a)
	if err != nil {
		return nil, err
	}
	held = true
	return &heldReply{job: j, done: j.Done(), wait: wait}, nil
}

// wait serves OpWait.
func (s *Server) wait(p *zmqx.Peer, req *protocol.Request) (any, error) {
	var a protocol.WaitArgs
	if err := protocol.DecodeArgs(req, &a); err != nil {
		return nil, err
	}
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
	if j.Finished() {
		return protocol.SpawnResult{JobID: j.ID(), Job: s.jobs.InfoWithUsage(j), Finished: true}, nil
	}
	done := j.Done()
	if err := s.reserveHeld(p); err != nil {
		return nil, err
	}
	return &heldReply{job: j, done: done, wait: time.Duration(a.WaitMs) * time.Millisecond}, nil
}

// holdReply answers w once the job has finished or w's wait ran out.
// The finished answer is sent by the goroutine that finishes the job,
// right after its terminal event (Job.AfterDone: no hand-off on the way
// from the process's exit to the reply); a goroutine of its own waits for
// the rest: the wait running out, the peer going away, the server
// stopping (jobs are ended before the server stops, so waits are
// answered then). Called from a request task, which holds reqWG and
// (through its worker) wg: both may grow here.
func (s *Server) holdReply(p *zmqx.Peer, env [][]byte, w *heldReply) {
	s.reqWG.Add(1)
	s.wg.Add(1)
	env = cloneFrames(env)  // (it outlives the request's buffers)
	var settled atomic.Bool // answered, or given up
	answered := make(chan struct{})
	answer := func(info protocol.JobInfo, finished bool) {
		if !settled.CompareAndSwap(false, true) {
			return
		}
		r := protocol.SpawnResult{JobID: w.job.ID(), Job: info, Finished: finished}
		b, err := protocol.OKReply(w.id, r)
		if err != nil {
			b = protocol.ErrorReply(w.id, protocol.Errorf(protocol.CodeInternal, "encode reply: %v", err))
		}
		// Released before the reply goes: a client that got it may hold
		// a new wait at once.
		s.releaseHeld(p)
		s.reply(p, env, b)
		close(answered)
	}
	cancel, pending := w.job.AfterDone(func(info protocol.JobInfo) { answer(info, true) })
	go func() {
		defer s.wg.Done()
		defer s.reqWG.Done()
		if !pending { // finished meanwhile
			answer(s.jobs.InfoWithUsage(w.job), true)
			return
		}
		select {
		case <-w.done:
			// The period the wait began in ended before AfterDone (a
			// service may already run again): that is the answer.
			cancel()
			answer(s.jobs.InfoWithUsage(w.job), true)
			return
		default:
		}
		t := time.NewTimer(w.wait)
		defer t.Stop()
		select {
		case <-answered:
			return
		case <-t.C:
			cancel()
			// (if it finished just now, its answer may have gone first:
			// then this one is not sent)
			finished := false
			select {
			case <-w.done:
				finished = true
			default:
			}
			answer(s.jobs.InfoWithUsage(w.job), finished)
			return
		case <-p.Gone():
		case <-s.ctx.Done():
		}
		cancel()
		if settled.CompareAndSwap(false, true) {
			s.releaseHeld(p)
		}
	}()
}

func cloneFrames(fs [][]byte) [][]byte {
	out := make([][]byte, len(fs))
	for i, f := range fs {
		out[i] = append([]byte{}, f...)
	}
	return out
}
