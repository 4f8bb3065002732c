package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// ErrSupervisorRestarted is returned (wrapping the supervisor's not-found
// error) by Follow when the supervisor restarted while following and does
// not know the job: its journal had no record of it (a job spawned just
// before a crash), so its later output and its fate are unknown. A job the
// restarted supervisor recovered is followed on (see Follow).
var ErrSupervisorRestarted = errors.New("supervisor restarted while following the job")

// FollowFunc receives a job's events. It returns an error to stop following.
type FollowFunc func(ev protocol.Event) error

// Follow streams the events of jobID with seq >= from (0 or 1 means from
// the start) to fn, exactly once and in seq order, until the job's
// terminal event (job.exited or job.failed) has been delivered. A service
// started again after it ended has later events: following goes on
// through such an earlier terminal event to the last one; one its
// supervisor's shutdown ended (reason supervisor-shutdown) is waited for,
// up to 30 s, under the next supervisor, which resumes it. Events no
// longer retained by the supervisor are reported to fn as one job.gap
// event (Seq 0) naming the missing seqs (its NoOutput set when the
// supervisor knows they carried no output), then following goes on. A
// job that left the supervisor's memory but has output on disk is
// replayed from its files to its end (its events other than output as
// such gaps).
//
// It listens on the event socket for low latency and fills any hole (a
// dropped event, a late subscription, a lost connection) with the
// subscribe op, so a slow or interrupted event socket costs latency, never
// data. Without an event socket it falls back to polling.
//
// Following goes on across a supervisor restart (a new instance id in a
// heartbeat or a reply): the restarted supervisor recovered the job from
// its journal, with the events it retained under their seqs. What it
// could not recover (output published after its last journal write) is
// reported as a job.gap, and a job that was running ends with job.failed,
// reason supervisor-restart. Output the restarted supervisor publishes
// again (what its journal held as not yet published, which the previous
// one may have published after all) is delivered once per offset. If it
// has no record of the job, Follow returns ErrSupervisorRestarted.
//
// With Paced, the follower also paces the job's output.
//
// jobID is the job's id, not its name (SpawnArgs.Name): events are
// published under ids; Status(ctx, name) returns the job, and its id.
func (c *Client) Follow(ctx context.Context, jobID string, from uint64, fn FollowFunc, opts ...FollowOption) error {
	if from == 0 {
		from = 1
	}
	f := follower{c: c, ctx: ctx, jobID: jobID, next: from, fn: fn}
	for _, o := range opts {
		o(&f)
	}
	if f.paced {
		if from == 1 {
			f.takenA.Store(0) // (from the first byte: nothing before it to take)
		} else {
			f.takenA.Store(-1)
		}
		// (the pace is taken once the first backfill says where the
		// output stands: a job spawned paced is held from its first byte
		// meanwhile.) It ends when Follow does, or as soon as ctx is done
		// (fn may be stuck: the job must not wait for it).
		stop := context.AfterFunc(ctx, f.unpace)
		c.addPacer(&f)
		defer func() {
			c.removePacer(&f)
			stop()
			f.unpace() // (again if ctx's ran: a pace that crossed it)
		}()
	}
	if c.opts.SubscribeMode == SubscribePoll {
		return f.poll(ctx)
	}
	sub := &subscription{c: c, topics: []string{protocol.JobTopic(jobID), protocol.TopicHeartbeat}}
	f.sub = sub
	defer sub.close()
	sub.connect(ctx)

	// Backfill first: the subscription is in place, so anything published
	// from here on reaches us, and anything before is replayed.
	if done, err := f.backfill(ctx); done || err != nil {
		return err
	}
	const period = 250 * time.Millisecond
	tick := time.NewTicker(period)
	defer tick.Stop()
	quietSince := time.Now()
	// check is how long the job may be quiet before the safety-net
	// backfill below; it doubles while the job stays quiet (up to
	// maxQuietCheck), so that a follower of a quiet job does not ask the
	// supervisor four times a second for hours.
	check := 2 * period
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.quit:
			return fmt.Errorf("follow %s: %w", jobID, ErrClosed)
		case ev := <-sub.events:
			sub.heard()
			if ev.Kind == protocol.KindHeartbeat {
				var hb protocol.HeartbeatPayload
				if ev.DecodePayload(&hb) == nil {
					sub.heartbeatEvery(hb.IntervalMs)
				}
				if hb.InstanceID != "" && f.seen(hb.InstanceID) {
					// A restarted supervisor: what it recovered of the job
					// (and what it lost, as missing seqs) comes through
					// subscribe.
					if done, err := f.backfill(ctx); done || err != nil {
						return err
					}
				}
				continue
			}
			if ev.JobID != jobID {
				continue
			}
			quietSince, check = time.Now(), 2*period
			switch {
			case c.opts.NoAutoBackfill && (ev.Kind == protocol.KindGap || ev.Seq > f.next):
				// Report the hole instead of filling it.
				if ev.Kind != protocol.KindGap {
					gap, _ := protocol.NewEvent(jobID, 0, ev.Ts, protocol.KindGap, protocol.GapPayload{From: f.next, To: ev.Seq - 1, Count: ev.Seq - f.next})
					if err := fn(gap); err != nil {
						return err
					}
					f.next = ev.Seq
					if done, err := f.deliver(ev); done || err != nil {
						return err
					}
				} else if err := fn(ev); err != nil {
					return err
				}
			case ev.Kind == protocol.KindGap || ev.Seq > f.next:
				if done, err := f.backfill(ctx); done || err != nil {
					return err
				}
			case ev.Seq == f.next:
				done, err := f.deliver(ev)
				if err != nil {
					return err
				}
				if done {
					if more, err := f.continues(ctx, ev); !more || err != nil {
						return err
					}
				}
			}
			// ev.Seq < f.next: a duplicate, already delivered.
			if len(sub.events) == 0 {
				f.pace(true) // (caught up with the event connection)
			}
		case <-tick.C:
			// The event connection may have been cut (a slow subscriber is
			// disconnected by the supervisor) or never established: after
			// a silence longer than a few heartbeats, connect again and
			// backfill what was missed.
			if sub.silentFor() > sub.silenceLimit() {
				sub.reconnect(ctx)
				check = 2 * period // (a new subscription: a new window to cover)
			}
			// Safety net for an event lost between subscription and
			// backfill: check for news when the job has been quiet (and
			// at every tick while there is no event connection).
			if quiet := time.Since(quietSince) >= check; quiet || !sub.ok() {
				if done, err := f.backfill(ctx); done || err != nil {
					return err
				}
				if quiet {
					quietSince, check = time.Now(), min(2*check, maxQuietCheck)
				}
			}
		}
	}
}

// maxQuietCheck bounds the interval of a follower's safety-net backfills
// while its job is quiet and its event connection live (events are not
// lost silently then: a dropped one comes with a job.gap, a cut
// connection is reconnected and backfilled).
const maxQuietCheck = 30 * time.Second

// subSilence is how long an event connection may stay silent (heartbeats
// come every second by default) before it is reconnected; a supervisor
// with heartbeats further apart than a third of it says so (heartbeats'
// intervalMs, subscribe's heartbeatIntervalMs) and is given three of them.
const subSilence = 3 * time.Second

// maxSubSilence bounds the silence allowed for long heartbeat intervals
// (the supervisor accepts up to an hour; a follower does not wait that
// long to find a broken connection: it reconnects, no harm done).
const maxSubSilence = 5 * time.Minute

// subscription is a SUB socket that can be reconnected; its events arrive
// on events. It is owned by one Follow call.
type subscription struct {
	c      *Client
	topics []string
	events chan protocol.Event

	mu       sync.Mutex
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	lastHear time.Time
	live     bool
	silence  time.Duration // allowed (0: subSilence; see heartbeatEvery)
}

func (s *subscription) connect(ctx context.Context) {
	if s.events == nil {
		s.events = make(chan protocol.Event, 256)
	}
	sctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	s.lastHear = time.Now()
	s.live = false
	s.mu.Unlock()
	dopts, err := s.c.opts.dialOptions(s.c.opts.EventAddress)
	var sub *zmtp.Client
	if err == nil {
		sub, err = zmtp.DialClientWith(sctx, "SUB", s.c.opts.EventAddress, dopts)
	}
	if err == nil {
		for _, t := range s.topics {
			err = errors.Join(err, sub.Subscribe(t))
		}
		if err != nil {
			sub.Close()
		}
	}
	if err != nil {
		return // polling through backfill until the next attempt
	}
	s.mu.Lock()
	s.live = true
	s.mu.Unlock()
	s.wg.Add(2)
	go func() {
		// Recv returns once the connection is closed.
		defer s.wg.Done()
		<-sctx.Done()
		sub.Close()
	}()
	go func() {
		defer s.wg.Done()
		for {
			frames, err := sub.Recv()
			if err != nil {
				return
			}
			if len(frames) != 2 {
				continue
			}
			// The frame is ours alone: decode without copying the payload.
			ev, err := protocol.DecodeEventNoCopy(frames[1])
			if err != nil {
				continue
			}
			select {
			case s.events <- *ev:
			case <-sctx.Done():
				return
			}
		}
	}()
}

func (s *subscription) heard() {
	s.mu.Lock()
	s.lastHear = time.Now()
	s.mu.Unlock()
}

// heartbeatEvery records the supervisor's heartbeat interval (0: not
// said, as by older supervisors).
func (s *subscription) heartbeatEvery(ms int64) {
	if ms <= 0 {
		return
	}
	s.mu.Lock()
	s.silence = min(max(subSilence, 3*time.Duration(ms)*time.Millisecond), maxSubSilence)
	s.mu.Unlock()
}

// silenceLimit is how long the connection may stay silent.
func (s *subscription) silenceLimit() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.silence == 0 {
		return subSilence
	}
	return s.silence
}

func (s *subscription) silentFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.lastHear)
}

func (s *subscription) ok() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.silence
	if limit == 0 {
		limit = subSilence
	}
	return s.live && time.Since(s.lastHear) < limit
}

func (s *subscription) reconnect(ctx context.Context) {
	s.close()
	s.connect(ctx)
}

func (s *subscription) close() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// poll follows through the control socket only.
func (f *follower) poll(ctx context.Context) error {
	t := time.NewTicker(f.c.opts.PollInterval)
	defer t.Stop()
	for {
		if done, err := f.backfill(ctx); done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.c.quit:
			return fmt.Errorf("follow %s: %w", f.jobID, ErrClosed)
		case <-t.C:
		}
	}
}

// subscribe fetches events from f.next, riding out a broken connection or
// a restarting supervisor: up to MaxReconnectAttempts tries,
// ReconnectInterval apart.
func (f *follower) subscribe(ctx context.Context) (protocol.SubscribeResult, error) {
	return f.subscribeLimit(ctx, 0)
}

// subscribeLimit is subscribe asking for at most limit events (0: all).
func (f *follower) subscribeLimit(ctx context.Context, limit int) (protocol.SubscribeResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := f.c.Subscribe(ctx, f.jobID, f.next, limit)
		if err == nil || ctx.Err() != nil || attempt >= f.c.opts.MaxReconnectAttempts || !transient(err) {
			return res, err
		}
		t := time.NewTimer(f.c.opts.ReconnectInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-f.c.quit:
			t.Stop()
			return res, ErrClosed
		case <-t.C:
		}
	}
}

// transient reports whether err is a connection problem worth a retry
// (not an answer from the supervisor).
func transient(err error) bool {
	var ce *ConnectError
	return errors.As(err, &ce) || errors.Is(err, context.DeadlineExceeded)
}

type follower struct {
	c     *Client
	ctx   context.Context // (Follow's)
	jobID string
	next  uint64
	fn    FollowFunc
	// instance is the supervisor's instance id last seen (heartbeats,
	// subscribe results); restarted is set once it changed.
	instance  string
	restarted bool
	// once drops output a restarted supervisor publishes again.
	once OutputOnce
	// sub is the event connection (nil when polling).
	sub *subscription
	// paced: the follower paces the job (see Paced), with the
	// supervisor's window, having told it on connection pacedOn of
	// output up to acked; seenEnd is the job's output end when a
	// backfill last brought everything published (all of it delivered
	// or reported missing: taken); paceOff: the supervisor does not know
	// the pace op.
	paced                  bool
	paceOff                atomic.Bool // (read by unpace, on ctx's end)
	window, acked, seenEnd int64
	pacedOn                *conn
	// paceMu orders pace and unpace requests (the supervisor may handle
	// a connection's requests out of order: a pace sent before the
	// release must be answered before the release goes); released: no
	// pace goes out after the release.
	paceMu   sync.Mutex
	released bool
	// takenA is what the follower has taken, for repace (the follow
	// goroutine's own fields are not for another goroutine): -1 while
	// not known (a follow from a later seq before its first output or
	// complete backfill).
	takenA atomic.Int64
	// onCaughtUp, if set, is given each subscribe result that brought
	// everything published (after its events were delivered).
	onCaughtUp func(protocol.SubscribeResult)
}

// FollowOption configures Follow.
type FollowOption func(*follower)

// Paced makes Follow pace the job's output (the pace op): the supervisor
// reads the job's output no further than a window (half its ring buffer)
// past what fn has been given, so that a job printing faster than the
// follower takes its output waits for it, as a pipe's writer waits for
// its reader, and none of it is lost to the ring buffer. The pace is
// held by the client's control connection and ends when Follow returns
// (or that connection goes away: the Client then paces again at once on a
// new one, from what fn was given, even while fn is busy). Spawn with SpawnArgs.Pace to pace from the
// first byte, before Follow starts. A supervisor without the pace op is
// followed unpaced. The pace is the connection's: two paced Follows of
// one job on one Client share it, and the first to return ends it.
func Paced() FollowOption { return func(f *follower) { f.paced = true } }

// pace tells the supervisor how far the follower has taken the output
// (see Paced): when a quarter window was taken since it last did, or,
// caughtUp (nothing more to deliver for now), whenever it took more; and
// at once on a connection that has not been told (the first, or a new
// one after a reconnect: the supervisor ended the old one's pace). The
// caught-up rule is what keeps a held job from waiting forever: the
// supervisor may hold it closer than the window (see Job.paceWindowLocked).
func (f *follower) pace(caughtUp bool) {
	if !f.paced || f.paceOff.Load() {
		return
	}
	taken := f.taken()
	f.paceMu.Lock()
	defer f.paceMu.Unlock()
	fresh := f.pacedOn == nil || f.c.currentConn() != f.pacedOn
	if !fresh && (taken <= f.acked || !caughtUp && taken < f.acked+max(f.window/4, 1)) {
		return
	}
	f.sendPaceLocked(taken)
}

// sendPaceLocked tells the supervisor that the follower took the output
// up to taken (f.paceMu held), unless the pace was released.
func (f *follower) sendPaceLocked(taken int64) {
	if f.released || f.ctx.Err() != nil {
		return // (a pace after the release would hold the job again)
	}
	// Answered even if ctx ends meanwhile (within RequestTimeout): the
	// release waits for it, so that it is not handled after the release.
	var res protocol.PaceResult
	err := f.c.Call(context.WithoutCancel(f.ctx), protocol.OpPace, protocol.PaceArgs{JobID: f.jobID, Offset: taken}, &res)
	var pe *protocol.Error
	switch {
	case err == nil:
		f.acked, f.window, f.pacedOn = max(f.acked, taken), res.WindowBytes, f.c.currentConn()
	case errors.As(err, &pe) && pe.Code == protocol.CodeUnknownOp:
		f.paceOff.Store(true) // (an older supervisor)
	}
}

// taken is how far the follower has taken the output: delivered, or
// reported missing (the follow goroutine's).
func (f *follower) taken() int64 { return max(f.once.end, f.seenEnd, 0) }

// repace paces the job again, on a new connection, from what the
// follower had acked, when the connection that held its pace is gone (the
// supervisor ended that pace with it): a follower whose fn is busy would
// otherwise pace again only once fn returns, the job running free
// meanwhile. (Called from the client's repace goroutine.)
func (f *follower) repace() {
	f.paceMu.Lock()
	defer f.paceMu.Unlock()
	if taken := f.takenA.Load(); taken >= 0 && !f.paceOff.Load() { // (unknown yet: its first pace will do)
		f.sendPaceLocked(taken)
	}
}

// noteTaken records for repace what the follower has taken (from the
// follow goroutine).
func (f *follower) noteTaken() {
	if t := f.taken(); t > 0 {
		f.takenA.Store(max(t, f.takenA.Load()))
	}
}

// unpace ends the follower's pace of the job (best effort: the
// connection's end ends it too).
func (f *follower) unpace() {
	// (also when this follower never paced: a spawn with Pace set the
	// pace on this connection, and it ends here too)
	if f.paceOff.Load() {
		return
	}
	f.paceMu.Lock() // (after a pace in flight)
	defer f.paceMu.Unlock()
	f.released = true
	select {
	case <-f.c.quit:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = f.c.Call(ctx, protocol.OpPace, protocol.PaceArgs{JobID: f.jobID, Release: true}, nil)
}

// releaseTimeout bounds the release of a pace (best effort: the
// connection's end ends the pace too).
const releaseTimeout = 2 * time.Second

// seen records the instance id of a heartbeat or a reply ("" if it had
// none) and reports whether it differs from the one seen before.
func (f *follower) seen(id string) bool {
	if id == "" {
		return false
	}
	changed := f.instance != "" && id != f.instance
	f.instance = id
	f.restarted = f.restarted || changed
	return changed
}

// lostInRestart reports whether err, from subscribe, says that a
// restarted supervisor does not know the job. (An error reply carries no
// instance id: health is asked when no change was seen yet.)
func (f *follower) lostInRestart(ctx context.Context, err error) bool {
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound || f.instance == "" {
		return false
	}
	if !f.restarted {
		if h, herr := f.c.Health(ctx); herr == nil {
			f.seen(h.InstanceID)
		}
	}
	return f.restarted
}

func (f *follower) deliver(ev protocol.Event) (done bool, err error) {
	ev, keep := f.once.Keep(ev)
	if !keep {
		f.next = ev.Seq + 1
		return false, nil
	}
	if f.paced {
		f.noteTaken() // (given to fn: taken, for a repace while fn is busy)
	}
	if err := f.fn(ev); err != nil {
		return true, err
	}
	f.next = ev.Seq + 1
	if f.paced && (ev.Kind == protocol.KindStdout || ev.Kind == protocol.KindStderr) {
		f.pace(false)
	}
	return ev.Kind.Terminal(), nil
}

// continues reports whether the job goes on after the terminal event ev
// (just delivered live): only a service can be started again, so only
// then is the supervisor asked.
func (f *follower) continues(ctx context.Context, ev protocol.Event) (bool, error) {
	if ev.Attempt == 0 {
		return false, nil
	}
	res, err := f.subscribeLimit(ctx, 1) // (riding out a restarting supervisor, as backfills do)
	if err != nil {
		return false, fmt.Errorf("follow %s: %w", f.jobID, err)
	}
	f.seen(res.InstanceID)
	if res.Job.LastSeq > ev.Seq {
		return true, nil
	}
	var p protocol.ExitPayload
	if ev.DecodePayload(&p) != nil || p.Reason != protocol.ReasonShutdown {
		return false, nil
	}
	// Its supervisor's shutdown ended it: the next supervisor resumes it
	// (--resume-services). Wait for one (up to resumeWait) and ask it.
	was := res.InstanceID
	deadline := time.Now().Add(resumeWait)
	for time.Now().Before(deadline) {
		t := time.NewTimer(f.c.opts.ReconnectInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
		// (each try within what is left of the wait: one that found no
		// supervisor yet took up to a connect timeout)
		tctx, cancel := context.WithDeadline(ctx, deadline)
		res, err := f.c.Subscribe(tctx, f.jobID, f.next, 1)
		cancel()
		if err == nil && res.InstanceID != "" && res.InstanceID != was {
			f.seen(res.InstanceID)
			return res.Job.LastSeq > ev.Seq, nil
		}
	}
	return false, nil
}

// resumeWait bounds how long Follow waits, after a service's run ended
// with its supervisor's shutdown, for the next supervisor to answer.
const resumeWait = 30 * time.Second

// apply hands a subscribe result to fn from f.next on, in seq order: the
// missing ranges as gap events (stamped ts) and the events, interleaved
// (a retained event may sit between two missing ranges: the started
// event before evicted output, a restored job's output tail before its
// renumbered end). It stops after an event for which stop reports true.
func (f *follower) apply(missing []protocol.SeqRange, events []protocol.Event, ts int64, stop func(ev protocol.Event, done bool) bool) (bool, error) {
	mi := 0
	gapsBelow := func(limit uint64) error {
		for ; mi < len(missing) && missing[mi].From < limit; mi++ {
			r := missing[mi]
			if r.To < f.next {
				continue
			}
			from := max(r.From, f.next)
			var bytes int64
			if from == r.From {
				bytes = r.Bytes // (of the whole range only)
			}
			gap, _ := protocol.NewEvent(f.jobID, 0, ts, protocol.KindGap, protocol.GapPayload{From: from, To: r.To, Count: r.To - from + 1, Bytes: bytes, NoOutput: r.NoOutput})
			if err := f.fn(gap); err != nil {
				return err
			}
			f.next = r.To + 1
		}
		return nil
	}
	for _, ev := range events {
		if err := gapsBelow(ev.Seq); err != nil {
			return true, err
		}
		if ev.Seq < f.next {
			continue
		}
		done, err := f.deliver(ev)
		if err != nil {
			return true, err
		}
		if stop(ev, done) {
			return true, nil
		}
	}
	return false, gapsBelow(math.MaxUint64)
}

// backfill fetches every retained event from f.next on, reporting missing
// ranges as gap events.
func (f *follower) backfill(ctx context.Context) (bool, error) {
	for {
		res, err := f.subscribe(ctx)
		if err != nil {
			if f.lostInRestart(ctx, err) {
				return true, fmt.Errorf("follow %s: %w: %w", f.jobID, ErrSupervisorRestarted, err)
			}
			return true, fmt.Errorf("follow %s: %w", f.jobID, err)
		}
		f.seen(res.InstanceID)
		if f.sub != nil {
			f.sub.heartbeatEvery(res.HeartbeatIntervalMs)
		}
		var end protocol.Event
		stop, err := f.apply(res.Missing, res.Events, time.Now().UnixMilli(), func(ev protocol.Event, done bool) bool {
			// (a terminal event below LastSeq ends an earlier supervision
			// period of a service that was started again; its later
			// events follow)
			if done && res.Job.LastSeq <= ev.Seq {
				end = ev
				return true
			}
			return false
		})
		if err != nil {
			return true, err
		}
		if !res.More && f.onCaughtUp != nil {
			f.onCaughtUp(res) // (everything published is delivered or reported missing)
		}
		if stop {
			// The job's end as this supervisor knows it; a service its
			// supervisor's shutdown ended goes on under the next one, as
			// when the end comes as an event (it ended the follow when a
			// backfill brought it, say the safety net's while the
			// supervisor shut down).
			if more, err := f.continues(ctx, end); !more || err != nil {
				return true, err
			}
			continue
		}
		if !res.More {
			// Everything published is delivered or reported missing.
			f.seenEnd = max(f.seenEnd, res.Job.OutputEnd)
			if f.paced {
				f.noteTaken()
			}
			f.pace(true)
			if res.Job.Finished() && res.Job.LastSeq < f.next {
				if !f.restarted {
					// Asked from past the end: the terminal event was
					// delivered before (from seq lastSeq+1 on there is
					// nothing; never a second, renumbered terminal).
					return true, nil
				}
				// The job ended, but its terminal event is numbered below
				// what we already have: a restarted supervisor recovered it
				// from a journal that lagged the events (older versions
				// numbered no reserve). Report its fate.
				return f.deliver(terminalFrom(res.Job, f.next))
			}
			return false, nil
		}
	}
}

// terminalFrom builds the terminal event of a finished job from its info.
func terminalFrom(info protocol.JobInfo, seq uint64) protocol.Event {
	kind := protocol.KindFailed
	if info.Reason == protocol.ReasonExit {
		kind = protocol.KindExited
	}
	ev, _ := protocol.NewEvent(info.JobID, seq, info.EndedAt, kind, protocol.ExitPayload{
		Reason: info.Reason, ExitCode: info.ExitCode, Signal: info.Signal, Error: info.Error,
		DurationMs: max(0, info.EndedAt-info.StartedAt), OutputEnd: info.OutputEnd,
	})
	return ev
}

// OutputOnce delivers a job's output once per offset across supervisor
// restarts: a restarted supervisor publishes again, under new seqs, the
// output its journal held as not yet published, which the dead one may
// have published too. Follow uses one; a client that follows anew after
// a restart (a new Follow from its next seq) keeps its own across them.
// The zero value is ready; it is not safe for concurrent use.
type OutputOnce struct {
	end int64 // the end offset of the output delivered so far
}

// Keep reports whether ev is to be delivered, and returns it: an output
// event whose bytes were all delivered already is not; one that overlaps
// them is cut to its new part. A terminal event sets the end to the one
// it carries: after a restart that may be below what the dead supervisor
// published (what it published after its last journal write is not
// known). A resumed service's next run writes past all of that (the
// supervisor skips offsets); supervisors before that change wrote from
// the terminal event's end, and output at those offsets was new, not the
// same bytes again.
func (o *OutputOnce) Keep(ev protocol.Event) (protocol.Event, bool) {
	switch {
	case ev.Kind == protocol.KindStdout || ev.Kind == protocol.KindStderr:
		var p protocol.OutputPayload
		if ev.DecodePayload(&p) != nil || len(p.Data) == 0 {
			return ev, true // (nothing there to deliver twice)
		}
		end := p.Offset + int64(len(p.Data))
		switch {
		case end <= o.end:
			return ev, false
		case p.Offset < o.end:
			attempt := ev.Attempt
			ev = protocol.NewOutputEvent(ev.JobID, ev.Seq, ev.Ts, ev.Kind, o.end, p.Data[o.end-p.Offset:])
			ev.Attempt = attempt
		}
		o.end = end
	case ev.Kind.Terminal():
		var p protocol.ExitPayload
		if ev.DecodePayload(&p) == nil && p.OutputEnd > 0 {
			o.end = p.OutputEnd
		}
	}
	return ev, true
}
