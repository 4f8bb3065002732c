package openclaw

import (
	"sync"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Sink is where Events sends dialect events: the event socket.
type Sink interface {
	// Offer sends [topic, body()] to the subscribers that want topic;
	// body is called at most once, and only when there are any (nobody
	// pays for an encoding nobody subscribed to). A nil body sends
	// nothing.
	Offer(topic []byte, body func() []byte)
}

// maxTails bounds the tails Events keeps (a tail is kept until the next
// output event of its stream, or the job's end: only jobs that stopped
// printing inside a character keep one for long).
const maxTails = 4096

// Events translates native events into dialect events, as they are
// published: [exec:<jobId>, JSON event]. It keeps only the tails of
// output events that end inside a character (see decodeOutput), so that
// the character comes out whole in the stream's next event, as poll and
// subscribe show it. A tail it does not have (the first dialect
// subscriber came after the stream's previous event, or that event was
// dropped at the queue's bound) makes the character U+FFFD in the event,
// where poll and subscribe look back and show it whole. Safe for
// concurrent use; a job's events must come in seq order.
type Events struct {
	mu    sync.Mutex
	tails map[tailKey][]byte
}

type tailKey struct {
	job    string
	stream protocol.Stream
}

// NewEvents returns an Events without tails.
func NewEvents() *Events { return &Events{tails: map[tailKey][]byte{}} }

// Publish sends the dialect form of native event ev, if it has one, to
// the subscribers of its job's topic.
func (e *Events) Publish(ev *protocol.Event, sink Sink) {
	if ev.JobID == "" {
		return // (heartbeats: the dialect has none)
	}
	topic := []byte(TopicPrefix + ev.JobID)
	switch {
	case isOutput(ev.Kind):
		p, err := ev.Output()
		if err != nil {
			return
		}
		k := tailKey{ev.JobID, streamOf(ev.Kind)}
		e.mu.Lock()
		head, body, tail := splitOutput(e.tails[k], p.Data)
		if tail == nil {
			delete(e.tails, k)
		} else {
			if len(e.tails) >= maxTails {
				for old := range e.tails { // (any one: a bound, not a policy)
					delete(e.tails, old)
					break
				}
			}
			e.tails[k] = tail
		}
		e.mu.Unlock()
		sink.Offer(topic, func() []byte { return marshal(translate(ev, textOf(head, body))) })
		return
	case ev.Kind.Terminal(), ev.Kind == protocol.KindGap:
		// (after a gap the tails may be stale: the events between are gone)
		e.forget(ev.JobID)
	case ev.Kind != protocol.KindStarted:
		return // (a kind of the native protocol only)
	}
	sink.Offer(topic, func() []byte {
		if d := translate(ev, ""); d != nil {
			return marshal(d)
		}
		return nil
	})
}

// forget drops the tails of job id.
func (e *Events) forget(id string) {
	e.mu.Lock()
	delete(e.tails, tailKey{id, protocol.Stdout})
	delete(e.tails, tailKey{id, protocol.Stderr})
	e.mu.Unlock()
}
