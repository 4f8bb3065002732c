package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmqx"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// ErrSupervisorRestarted is returned by Follow when the supervisor's
// instance id changed while following: the job's fate must be read from
// status (it was recovered as failed, or is unknown).
var ErrSupervisorRestarted = errors.New("supervisor restarted while following the job")

// FollowFunc receives a job's events. It returns an error to stop following.
type FollowFunc func(ev protocol.Event) error

// Follow streams the events of jobID with seq >= from (0 or 1 means from
// the start) to fn, exactly once and in seq order, until the job's
// terminal event (job.exited or job.failed) has been delivered. Events no
// longer retained by the supervisor are reported to fn as one job.gap
// event (Seq 0) naming the missing seqs, then following goes on.
//
// It listens on the event socket for low latency and fills any hole (a
// dropped event, a late subscription, a lost connection) with the
// subscribe op, so a slow or interrupted event socket costs latency, never
// data. Without an event socket it falls back to polling.
func (c *Client) Follow(ctx context.Context, jobID string, from uint64, fn FollowFunc) error {
	if from == 0 {
		from = 1
	}
	events := make(chan protocol.Event, 256)
	var wg sync.WaitGroup
	defer wg.Wait()
	subOK := false
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	sub, err := zmqx.DialToken(sctx, zmqx.Sub, c.opts.EventAddress, c.opts.DialTimeout, c.opts.tokenFor(c.opts.EventAddress))
	if err == nil {
		err = errors.Join(
			sub.SetOption(zmqx.OptionSubscribe, protocol.JobTopic(jobID)),
			sub.SetOption(zmqx.OptionSubscribe, protocol.TopicHeartbeat))
		if err != nil {
			sub.Close()
		}
	}
	if err == nil {
		subOK = true
		wg.Add(2)
		go func() {
			// zmq4's Recv only returns once the socket is closed.
			defer wg.Done()
			<-sctx.Done()
			sub.Close()
		}()
		go func() {
			defer wg.Done()
			for {
				msg, err := sub.Recv()
				if err != nil {
					return
				}
				if len(msg.Frames) != 2 {
					continue
				}
				ev, err := protocol.DecodeEvent(msg.Frames[1])
				if err != nil {
					continue
				}
				select {
				case events <- *ev:
				case <-sctx.Done():
					return
				}
			}
		}()
	}

	f := follower{c: c, jobID: jobID, next: from, fn: fn}
	// Backfill first: the subscription is in place, so anything published
	// from here on reaches us, and anything before is replayed.
	if done, err := f.backfill(ctx); done || err != nil {
		return err
	}
	period := 500 * time.Millisecond
	if !subOK {
		period = 100 * time.Millisecond
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	quietSince := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-events:
			if ev.Kind == protocol.KindHeartbeat {
				var hb protocol.HeartbeatPayload
				if ev.DecodePayload(&hb) == nil {
					if f.instance != "" && hb.InstanceID != f.instance {
						return fmt.Errorf("follow %s: %w", jobID, ErrSupervisorRestarted)
					}
					f.instance = hb.InstanceID
				}
				continue
			}
			if ev.JobID != jobID {
				continue
			}
			quietSince = time.Now()
			switch {
			case ev.Kind == protocol.KindGap || ev.Seq > f.next:
				if done, err := f.backfill(ctx); done || err != nil {
					return err
				}
			case ev.Seq == f.next:
				if done, err := f.deliver(ev); done || err != nil {
					return err
				}
			}
			// ev.Seq < f.next: a duplicate, already delivered.
		case <-tick.C:
			// Safety net for an event lost between subscription and
			// backfill, or a dead event connection: check for news.
			if time.Since(quietSince) >= period {
				if done, err := f.backfill(ctx); done || err != nil {
					return err
				}
			}
		}
	}
}

type follower struct {
	c        *Client
	jobID    string
	next     uint64
	fn       FollowFunc
	instance string
}

func (f *follower) deliver(ev protocol.Event) (done bool, err error) {
	if err := f.fn(ev); err != nil {
		return true, err
	}
	f.next = ev.Seq + 1
	return ev.Kind.Terminal(), nil
}

// backfill fetches every retained event from f.next on, reporting missing
// ranges as gap events.
func (f *follower) backfill(ctx context.Context) (bool, error) {
	for {
		res, err := f.c.Subscribe(ctx, f.jobID, f.next, 0)
		if err != nil {
			return true, fmt.Errorf("follow %s: %w", f.jobID, err)
		}
		for _, r := range res.Missing {
			if r.To < f.next {
				continue
			}
			gap, _ := protocol.NewEvent(f.jobID, 0, time.Now().UnixMilli(), protocol.KindGap,
				protocol.GapPayload{From: max(r.From, f.next), To: r.To, Count: r.To - max(r.From, f.next) + 1})
			if err := f.fn(gap); err != nil {
				return true, err
			}
			f.next = r.To + 1
		}
		for _, ev := range res.Events {
			if ev.Seq < f.next {
				continue
			}
			if done, err := f.deliver(ev); done || err != nil {
				return done, err
			}
		}
		if !res.More {
			return false, nil
		}
	}
}
