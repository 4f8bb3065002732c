package server

import (
	"fmt"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/openclaw"
	"github.com/exec-supervisor/exec-supervisor/internal/wireerr"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// recvLoop handles the control requests queued before the peers' readers
// were told to hand requests over directly (see Start), until the socket
// closes.
func (s *Server) recvLoop() {
	defer s.wg.Done()
	for {
		msg, err := s.ctl.Recv()
		if err != nil {
			return // closed
		}
		if !s.incoming(msg) {
			return
		}
	}
}

// incoming takes one control request, on its peer's reader goroutine (or
// recvLoop's), and hands it to a worker. A message is [identity, "",
// body] (REQ, or DEALER speaking the REQ envelope) or [identity, body]
// (bare DEALER); replies use the same envelope. It reports false when the
// server is stopping.
func (s *Server) incoming(msg zmtp.Incoming) bool {
	p := msg.Peer
	if len(msg.Frames) < 1 || p.Closed() {
		p.Release() // nobody left to answer
		return true
	}
	envelope, body := [][]byte(nil), msg.Frames
	if len(body) >= 2 && len(body[0]) == 0 {
		envelope, body = msg.Frames[:1], body[1:]
	}
	// A body starting with '{' is a request of OpenClaw's JSON dialect
	// (no msgpack map starts so): one byte looked at, nothing more on the
	// native path.
	dialect := len(body) > 0 && openclaw.IsDialect(body[0])
	if len(body) != 1 {
		why := fmt.Sprintf("request must be one body frame after the envelope; got %d frames", len(body))
		if dialect {
			s.reply(p, envelope, openclaw.BadRequest(why))
		} else {
			s.reply(p, envelope, protocol.ErrorReply("", protocol.Errorf(protocol.CodeBadRequest, "%s", why)))
		}
		p.Release()
		return true
	}
	select {
	case s.inflight <- struct{}{}:
	case <-s.ctx.Done():
		p.Release()
		return false
	}
	// Close waits for handlers; once it has started waiting, no new
	// handler may be added (a WaitGroup must not grow during Wait).
	s.reqMu.Lock()
	if s.reqStopped {
		s.reqMu.Unlock()
		<-s.inflight
		if dialect {
			s.reply(p, envelope, openclaw.BadRequest("supervisor is shutting down"))
		} else {
			s.reply(p, envelope, protocol.ErrorReply("", protocol.Errorf(protocol.CodeShuttingDown, "supervisor is shutting down")))
		}
		p.Release()
		return true
	}
	s.reqWG.Add(1)
	s.reqMu.Unlock()
	env := envelope
	if dialect {
		// On a worker: a dialect request may run several ops, and wait
		// (a kill for the journal).
		b := body[0]
		s.hand(func() {
			defer s.reqWG.Done()
			defer func() { <-s.inflight }()
			defer p.Release()
			if !p.Closed() {
				s.reply(p, env, s.dialect.Handle(dialectNative{s, p}, b))
			}
		})
		return true
	}
	start := time.Now()
	req, derr := protocol.DecodeRequest(body[0], s.cfg.MaxRequestBytes)
	task := func() {
		defer s.reqWG.Done()
		defer func() { <-s.inflight }()
		defer p.Release()
		if p.Closed() {
			return // the peer went away while this waited
		}
		out, w := s.handle(p, req, derr, start)
		if w != nil {
			s.holdReply(p, env, w)
			return
		}
		s.reply(p, env, out)
	}
	if msg.Alone && derr == nil && quickOp(req.Op) {
		// The peer waits for this reply and sent nothing else: no
		// hand-off to a worker (waking one cost 10-40 µs of CPU and 2-3
		// context switches per request, measured on spawns one at a
		// time). What the peer sends meanwhile waits in the socket, so
		// only ops that never wait on anything are handled here.
		task()
		return true
	}
	if derr == nil && req.ID != "" && (req.Op == protocol.OpSpawn || req.Op == protocol.OpWait) {
		// A cancel read after this may be handled before it is held
		// (see heldCounts.pending).
		k := heldKey{p, req.ID}
		s.notePending(k)
		run := task
		task = func() { defer s.clearPending(k); run() }
	}
	s.hand(task)
	return true
}

// hand gives task to an idle worker, else to a new one (at most
// MaxInFlight run at once, bounded by inflight: see incoming).
func (s *Server) hand(task func()) {
	select {
	case s.work <- task:
	default:
		s.wg.Add(1)
		go s.worker(task)
	}
}

// dialectNative runs the native requests a dialect request makes through
// the server's own op handling, on behalf of the dialect's peer.
type dialectNative struct {
	s *Server
	p *zmtp.Peer
}

func (d dialectNative) Do(req *protocol.Request) []byte {
	out, w := d.s.handle(d.p, req, nil, time.Now())
	if w != nil { // (the dialect asks for no waits)
		return protocol.ErrorReply(req.ID, protocol.Errorf(protocol.CodeInternal, "a held reply for a dialect request"))
	}
	return out
}

// workerIdle is how long a request worker waits for more work before it
// ends. Workers are kept (rather than a goroutine per request) because a
// spawn runs deep enough to grow a fresh goroutine's stack several times.
const workerIdle = 10 * time.Second

// worker runs task, then further requests handed to it, until it has been
// idle for workerIdle or the server stops.
func (s *Server) worker(task func()) {
	defer s.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		task()
		idle.Reset(workerIdle)
		select {
		case task = <-s.work:
		case <-idle.C:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// reply queues the reply for the peer's own writer: it never waits for a
// slow peer (one whose queue overflows is disconnected).
func (s *Server) reply(p *zmtp.Peer, env [][]byte, body []byte) {
	frames := append(env[:len(env):len(env)], body)
	if err := s.ctl.Send(p, frames); err != nil && s.ctx.Err() == nil {
		s.log.Debug("control reply not queued", "err", err)
	}
}

// spawnOptions takes a spawn's pace (a property of the request, not of
// the job) out of a: the asking peer p paces the job from its first byte.
func (s *Server) spawnOptions(p *zmtp.Peer, a *protocol.SpawnArgs) (protocol.SpawnArgs, jobs.SpawnOptions) {
	var o jobs.SpawnOptions
	if a.Pace {
		o = jobs.SpawnOptions{Pacer: p, PaceWatch: paceWatch(p)}
	}
	a.Pace = false
	return *a, o
}

// paceWatch releases a pace of peer p when p goes away. While it paces a
// job, p is not idle (never evicted as such: its job would run unpaced).
func paceWatch(p *zmtp.Peer) func(release func()) func() bool {
	return func(release func()) func() bool {
		p.Hold()
		stop := p.OnGone(release)
		return func() bool {
			p.Unhold()
			return stop()
		}
	}
}

// quickOp reports whether op may be handled on the peer's reader (see
// incoming): it never waits for a job, a pipe or a long encoding. (write
// may wait 2 s for a job to read its input; list-jobs, subscribe and
// history may encode large replies; stop and restart end runs.)
func quickOp(op protocol.Op) bool {
	switch op {
	case protocol.OpSpawn, protocol.OpWait, protocol.OpStatus, protocol.OpHealth, protocol.OpPoll, protocol.OpCancel, protocol.OpPace:
		return true
	}
	return false
}

// handle runs one request from peer p (decoded at start: req, or the
// decoding error err) and returns the encoded reply, or
// the wait the reply is held for (see holdReply). It never panics on bad
// input; a panic in an op is turned into an internal error.
func (s *Server) handle(p *zmtp.Peer, req *protocol.Request, err error, start time.Time) (out []byte, w *heldReply) {
	id, op := "", protocol.Op("")
	if req != nil {
		id, op = req.ID, req.Op
	}
	code := "ok"
	defer func() { s.metrics.ObserveRequest(op, code, time.Since(start)) }()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in request handler", "op", string(req.Op), "panic", r)
			out, w = protocol.ErrorReply(id, protocol.Errorf(protocol.CodeInternal, "internal error")), nil
		}
	}()
	if err != nil {
		s.log.Debug("bad request", "err", err)
		pe := toWire(err)
		code = string(pe.Code)
		return protocol.ErrorReply(id, pe), nil
	}
	result, err := s.dispatch(p, req)
	if h, ok := result.(*heldReply); ok && err == nil {
		h.id = id
		return nil, h
	}
	if err != nil {
		pe := toWire(err)
		code = string(pe.Code)
		s.log.Debug("request failed", "op", string(req.Op), "code", string(pe.Code), "err", pe.Message, "took", time.Since(start))
		return protocol.ErrorReply(id, pe), nil
	}
	b, err := protocol.OKReply(id, result)
	if err != nil {
		return protocol.ErrorReply(id, protocol.Errorf(protocol.CodeInternal, "encode reply: %v", err)), nil
	}
	if len(b) > protocol.MaxReplyBytes {
		return protocol.ErrorReply(id, protocol.Errorf(protocol.CodeTooLarge, "reply would be %d bytes; ask for less", len(b))), nil
	}
	return b, nil
}

// toWire maps any error to a wire error (wireerr.Of: the one place that
// decides codes).
func toWire(err error) *protocol.Error { return wireerr.Of(err) }
