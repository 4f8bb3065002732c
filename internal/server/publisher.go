package server

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// publisher queues events toward the PUB socket. The queue is bounded by
// hwm events: past it the oldest event is dropped and the drop is
// remembered per job as seq ranges, announced by job.gap events before the
// job's next event goes out (or as soon as the queue is empty). Nothing is
// dropped without a gap event and a counter.
type publisher struct {
	log  *slog.Logger
	sock sender
	hwm  int

	mu      sync.Mutex
	q       []protocol.Event // q[head:] is the queue
	head    int
	gaps    map[string][]protocol.SeqRange
	gapJobs []string // jobs with gaps, in order of first drop
	wake    chan struct{}
	closed  bool
	// live is set once run serves (the socket is in place); inflight
	// counts events being sent right now, by run or inline by Publish.
	live     bool
	inflight int
	// queuedOnly disables sending inline (Config.EventsQueuedOnly).
	queuedOnly bool

	published atomic.Uint64
	dropped   atomic.Uint64
	gapEvents atomic.Uint64
	sendErrs  atomic.Uint64

	now func() time.Time
	// onPublished, if set, is called for every event sent.
	onPublished func(protocol.Kind)
	// also, if set, is given every event sent, after the socket (gap
	// events included): OpenClaw's dialect publishes it its own way.
	also func(*protocol.Event)
}

// sender is the event socket as the publisher sees it.
type sender interface {
	SendParts(topic []byte, parts ...[]byte) error
}

func newPublisher(log *slog.Logger, sock sender, hwm int) *publisher {
	return &publisher{log: log, sock: sock, hwm: hwm, gaps: map[string][]protocol.SeqRange{}, wake: make(chan struct{}, 1), now: time.Now}
}

// Publish implements jobs.Sink. It never blocks. When nothing is queued
// or being sent, the event goes to the socket's queues at once, on the
// caller's goroutine (one handoff less on every event's way out); order
// per job holds because a job publishes one event at a time and an inline
// send only starts when no other send is under way.
func (p *publisher) Publish(ev protocol.Event) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if p.live && !p.queuedOnly && p.head == len(p.q) && len(p.gapJobs) == 0 && p.inflight == 0 {
		p.inflight++
		p.mu.Unlock()
		p.send(ev)
		p.sent()
		return
	}
	if len(p.q)-p.head >= p.hwm {
		p.dropOldestLocked()
	}
	p.q = append(p.q, ev)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *publisher) dropOldestLocked() {
	old := p.q[p.head]
	p.q[p.head] = protocol.Event{}
	p.head++
	p.dropped.Add(1)
	if old.Seq == 0 || old.JobID == "" {
		return // heartbeats and gap markers are not part of a job sequence
	}
	rs, seen := p.gaps[old.JobID]
	if n := len(rs); n > 0 && rs[n-1].To+1 == old.Seq {
		rs[n-1].To = old.Seq
	} else {
		rs = append(rs, protocol.SeqRange{From: old.Seq, To: old.Seq})
	}
	if !seen {
		p.gapJobs = append(p.gapJobs, old.JobID)
	}
	p.gaps[old.JobID] = rs
}

// sent ends one send counted in inflight.
func (p *publisher) sent() {
	p.mu.Lock()
	p.inflight--
	p.mu.Unlock()
}

// next returns the next message to send (counted in inflight until sent
// is called): a pending gap of ev's job comes before ev; with an empty
// queue, any pending gap.
func (p *publisher) next() (protocol.Event, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ev, ok := p.nextLocked()
	if ok {
		p.inflight++
	}
	return ev, ok
}

func (p *publisher) nextLocked() (protocol.Event, bool) {
	if p.head < len(p.q) {
		ev := p.q[p.head]
		if rs := p.gaps[ev.JobID]; len(rs) > 0 && rs[0].To < ev.Seq {
			return p.takeGapLocked(ev.JobID), true
		}
		p.q[p.head] = protocol.Event{}
		p.head++
		if p.head == len(p.q) {
			p.q, p.head = p.q[:0], 0
		} else if p.head > 1024 && p.head*2 > len(p.q) {
			p.q, p.head = append([]protocol.Event(nil), p.q[p.head:]...), 0
		}
		return ev, true
	}
	for len(p.gapJobs) > 0 {
		id := p.gapJobs[0]
		if len(p.gaps[id]) > 0 {
			return p.takeGapLocked(id), true
		}
		p.gapJobs = p.gapJobs[1:]
		delete(p.gaps, id)
	}
	return protocol.Event{}, false
}

func (p *publisher) takeGapLocked(id string) protocol.Event {
	rs := p.gaps[id]
	r := rs[0]
	p.gaps[id] = rs[1:]
	p.gapEvents.Add(1)
	ev, _ := protocol.NewEvent(id, 0, p.now().UnixMilli(), protocol.KindGap,
		protocol.GapPayload{From: r.From, To: r.To, Count: r.To - r.From + 1})
	p.log.Warn("events dropped at the high water mark", "job", id, "from", r.From, "to", r.To)
	return ev
}

// run sends queued events until stop is closed, then flushes what is
// queued (bounded by flushBudget) and returns.
func (p *publisher) run(stop <-chan struct{}, flushBudget time.Duration) {
	p.mu.Lock()
	p.live = true
	p.mu.Unlock()
	for {
		for {
			ev, ok := p.next()
			if !ok {
				break
			}
			p.send(ev)
			p.sent()
			select {
			case <-stop:
				p.flush(flushBudget)
				return
			default:
			}
		}
		select {
		case <-stop:
			p.flush(flushBudget)
			return
		case <-p.wake:
		}
	}
}

func (p *publisher) flush(budget time.Duration) {
	deadline := time.Now().Add(budget)
	for time.Now().Before(deadline) {
		ev, ok := p.next()
		if !ok {
			break
		}
		p.send(ev)
		p.sent()
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

func (p *publisher) send(ev protocol.Event) {
	topic := protocol.TopicHeartbeat
	if ev.Kind != protocol.KindHeartbeat {
		topic = protocol.JobTopic(ev.JobID)
	}
	// The event's payload is sent as it is (no copy), after its header.
	hdr := protocol.AppendEventHeader(make([]byte, 0, 64+len(ev.JobID)), &ev)
	payload := ev.Payload
	if payload == nil {
		payload = []byte{0xc0}
	}
	if err := p.sock.SendParts([]byte(topic), hdr, payload); err != nil {
		p.sendErrs.Add(1)
		p.log.Debug("publish event", "err", err)
		return
	}
	p.published.Add(1)
	if p.onPublished != nil {
		p.onPublished(ev.Kind)
	}
	if p.also != nil {
		p.also(&ev)
	}
}

// queued returns the number of events waiting.
func (p *publisher) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.q) - p.head
}
