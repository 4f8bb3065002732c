package local

import (
	"context"
	"math"
	"sync"
	"syscall"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/wireerr"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// backend is job id of an Engine, as its client.Job reaches it; pacer,
// if set, is its pace's owner (a job started with Pace).
type backend struct {
	e     *Engine
	id    string
	pacer *byte
}

// Follow reads the job's events from the engine (no copy through a
// socket), woken by the sink when there are new ones.
func (b *backend) Follow(ctx context.Context, fn client.FollowFunc) error {
	j, err := b.e.m.Get(b.id)
	if err != nil {
		return engineErr(err)
	}
	notify := b.e.sink.watch(b.id)
	defer b.e.sink.unwatch(b.id)
	if b.pacer != nil {
		defer j.Unpace(b.pacer)
	}
	s := sequencer{jobID: b.id, next: 1, fn: fn}
	for {
		res, err := j.Events(s.next, 0)
		if err != nil {
			return engineErr(err)
		}
		if done, err := s.apply(res.Missing, res.Events); done || err != nil {
			return err
		}
		if b.pacer != nil {
			_ = j.Pace(b.pacer, s.taken, nil) // (what fn was given: taken)
		}
		if res.More {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-notify:
		}
	}
}

// Ended returns nil once the job has finished.
func (b *backend) Ended(ctx context.Context) error {
	j, err := b.e.m.Get(b.id)
	if err != nil {
		return engineErr(err)
	}
	select {
	case <-j.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Kill ends the job through the engine's kill path.
func (b *backend) Kill(context.Context) error {
	j, err := b.e.m.Get(b.id)
	if err != nil {
		return engineErr(err)
	}
	_, err = j.Kill(protocol.ReasonManualCancel, syscall.SIGTERM)
	return engineErr(err)
}

// Write sends input to the job.
func (b *backend) Write(_ context.Context, data []byte, eof bool) error {
	j, err := b.e.m.Get(b.id)
	if err != nil {
		return engineErr(err)
	}
	_, err = j.Write(data, eof)
	return engineErr(err)
}

// engineErr gives an error of the engine to the caller as the supervisor
// would send it: a *protocol.Error of the same code (wireerr).
func engineErr(err error) error {
	if err == nil {
		return nil
	}
	return wireerr.Of(err)
}

// sequencer hands pages of a job's events (jobs.Job.Events) to fn from
// seq next on, in seq order, each once: the missing ranges as job.gap
// events (Seq 0), interleaved with the events retained, up to the first
// terminal event. (An engine in this process has no restarts to ride
// out: the supervisor's follower in pkg/client does that part too.)
type sequencer struct {
	jobID string
	next  uint64
	fn    client.FollowFunc
	// taken is the end offset of the output given to fn (for the pace).
	taken int64
}

// apply hands one page to fn; done once the terminal event was given
// (or fn failed).
func (s *sequencer) apply(missing []protocol.SeqRange, events []protocol.Event) (done bool, err error) {
	mi := 0
	gapsBelow := func(limit uint64) error {
		for ; mi < len(missing) && missing[mi].From < limit; mi++ {
			r := missing[mi]
			if r.To < s.next {
				continue
			}
			from := max(r.From, s.next)
			var bytes int64
			if from == r.From {
				bytes = r.Bytes // (of the whole range only)
			}
			gap, _ := protocol.NewEvent(s.jobID, 0, 0, protocol.KindGap, protocol.GapPayload{From: from, To: r.To, Count: r.To - from + 1, Bytes: bytes, NoOutput: r.NoOutput})
			if err := s.fn(gap); err != nil {
				return err
			}
			s.next = r.To + 1
		}
		return nil
	}
	for _, ev := range events {
		if err := gapsBelow(ev.Seq); err != nil {
			return true, err
		}
		if ev.Seq < s.next {
			continue
		}
		if err := s.fn(ev); err != nil {
			return true, err
		}
		s.next = ev.Seq + 1
		if ev.Kind == protocol.KindStdout || ev.Kind == protocol.KindStderr {
			if p, err := ev.Output(); err == nil {
				s.taken = max(s.taken, p.Offset+int64(len(p.Data)))
			}
		}
		if ev.Kind.Terminal() {
			return true, nil
		}
	}
	return false, gapsBelow(math.MaxUint64)
}

// sink wakes the follower of a job when it has a new event (the engine's
// event sink: an Engine publishes nowhere else).
type sink struct {
	mu     sync.Mutex
	notify map[string]chan struct{}
}

var _ jobs.Sink = (*sink)(nil)

// Publish wakes ev's job's follower, if any.
func (s *sink) Publish(ev protocol.Event) {
	s.mu.Lock()
	ch := s.notify[ev.JobID]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *sink) watch(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.notify[id]
	if ch == nil {
		ch = make(chan struct{}, 1)
		s.notify[id] = ch
	}
	return ch
}

func (s *sink) unwatch(id string) {
	s.mu.Lock()
	delete(s.notify, id)
	s.mu.Unlock()
}
