package zmtp

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// outQueue is the writing half of one peer connection of our ROUTER or
// PUB: messages are queued without blocking the sender, a goroutine of its
// own writes them (batched, writev), and a peer whose unsent bytes would
// exceed max is disconnected rather than allowed to grow memory or slow
// anyone else.
//
// When nothing is queued or being written, the sender writes the message
// itself with one non-blocking writev: what the socket takes goes out at
// once (no hand-off to the writer goroutine, which costs a wake-up on the
// reply's and the event's critical path); whatever it does not take is
// queued for the writer, in order.
//
// Unsent bytes count from the moment a message is queued until the writer
// has written it (a batch being written is still held in memory). One
// message is always taken when nothing is waiting, whatever its size (a
// large reply to a client that reads). Queues may share a budget: the
// bytes waiting in all of them together are bounded too (see
// replyBudget).
type outQueue struct {
	c       *hardenedConn
	max     int
	reason  string // rejection reason when the bound is exceeded
	onClose func() // called once, after the connection is closed
	// budget, when set, bounds the bytes waiting in all its queues.
	budget *replyBudget

	mu sync.Mutex
	// queue is what waits for the writer; queued counts it and the batch
	// the writer is writing.
	queue  []queuedMsg
	queued int
	// sizes are the unsent bytes of each message counted in queued,
	// oldest first (the head may be part written): what waits behind the
	// head is what counts against max (one message of any size passes,
	// and a client that reads may have asked for more meanwhile), and is
	// how the budget tells a peer that stopped reading (replies pile up
	// behind the one being sent) from one that just asked for a large one.
	sizes []int
	// behind mirrors queued less the head's unsent bytes, for the budget.
	behind atomic.Int64
	// held mirrors queued, for readers without mu (the budget's choice of
	// whom to cut off, idleness).
	held atomic.Int64
	// writing is set while someone (a sender's direct write or the
	// writer) is writing: nobody else may write then.
	writing bool
	closed  bool
	wake    chan struct{}
	done    chan struct{}
	once    sync.Once
	// gone is cancelled with done (for OnGone's callbacks).
	gone       context.Context
	cancelGone context.CancelFunc
}

// queuedMsg is a message waiting for the writer: its wire bytes, or on a
// CURVE connection, when plain, the frames still to be boxed (the writer
// boxes them: see curveDirectMax).
type queuedMsg struct {
	wire  net.Buffers
	plain bool
}

// curveDirectMax is the largest message a sender boxes and writes itself
// on a CURVE connection when nothing is queued (a reply, a small event:
// no wake-up on their way). Larger ones are boxed by the writer
// goroutine, so that boxing a job's bulk output overlaps reading the
// next: sealed by the job's reader, the cipher and the reads took turns
// on one goroutine (CURVE's output throughput was held to 0.34-0.40x
// PLAIN's).
const curveDirectMax = 16 << 10

func newOutQueue(c *hardenedConn, max int, reason string, onClose func()) *outQueue {
	gone, cancel := context.WithCancel(context.Background())
	return &outQueue{c: c, max: max, reason: reason, onClose: onClose, wake: make(chan struct{}, 1), done: make(chan struct{}),
		gone: gone, cancelGone: cancel}
}

// addQueued changes the unsent byte count (q.mu held), and the budget's.
func (q *outQueue) addQueued(n int) {
	q.queued += n
	q.held.Store(int64(q.queued))
	if len(q.sizes) > 0 {
		q.behind.Store(int64(q.queued - q.sizes[0]))
	} else {
		q.behind.Store(0)
	}
	if q.budget != nil {
		q.budget.total.Add(int64(n))
	}
}

// enqueue queues an encoded message; it reports false (and disconnects the
// peer) when the peer is closed or too far behind, or when it has the most
// bytes waiting behind its head of all the queues of a budget that is
// exceeded (see replyBudget).
func (q *outQueue) enqueue(wire net.Buffers, size int) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	cc := q.c.curve
	if cc != nil {
		// Boxed by whoever writes it (writeDirect, writeLoop: under
		// q.writing), so nonces go up in the order messages are
		// written. Its size is known now.
		sealed, err := curveSealedSize(wire)
		if err != nil {
			q.mu.Unlock()
			q.c.l.policy.reject("protocol-violation", q.c.peer(), err)
			q.close()
			return false
		}
		size = sealed
	}
	if len(q.sizes) > 0 && q.queued-q.sizes[0]+size > q.max {
		q.mu.Unlock()
		q.c.l.policy.reject(q.reason, q.c.peer(), fmt.Errorf("more than %d bytes waiting", q.max))
		q.close()
		return false
	}
	if len(q.queue) == 0 && !q.writing && (cc == nil || size <= curveDirectMax) {
		q.writing = true
		q.mu.Unlock()
		if cc != nil {
			var err error
			if wire, _, err = cc.sealWire(wire); err != nil { // (not after curveSealedSize: the same parse)
				q.c.l.policy.reject("protocol-violation", q.c.peer(), err)
				q.close()
				return false
			}
		}
		return q.writeDirect(wire)
	}
	q.queue = append(q.queue, queuedMsg{wire: wire, plain: cc != nil})
	q.sizes = append(q.sizes, size)
	q.addQueued(size)
	q.mu.Unlock()
	if !q.fitBudget() {
		return false
	}
	q.wakeWriter()
	return true
}

// fitBudget enforces the budget after q queued more; it reports false
// when q itself was cut off.
func (q *outQueue) fitBudget() bool {
	if q.budget == nil {
		return true
	}
	q.budget.enforce()
	return !q.isClosed()
}

func (q *outQueue) isClosed() bool {
	select {
	case <-q.done:
		return true
	default:
		return false
	}
}

// writeDirect writes what the socket takes of wire without waiting
// (q.writing is held) and queues the rest for the writer.
func (q *outQueue) writeDirect(wire net.Buffers) bool {
	rest, err := q.c.tryWriteBuffers(wire)
	q.mu.Lock()
	q.writing = false
	if err != nil || q.closed {
		q.mu.Unlock()
		q.close()
		return false
	}
	if len(rest) > 0 {
		n := 0
		for _, b := range rest {
			n += len(b)
		}
		// Still ahead of anything queued meanwhile.
		q.queue = append([]queuedMsg{{wire: rest}}, q.queue...)
		q.sizes = append([]int{n}, q.sizes...)
		q.addQueued(n)
	}
	more := len(q.queue) > 0
	q.mu.Unlock()
	if more {
		if !q.fitBudget() {
			return false
		}
		q.wakeWriter()
	}
	return true
}

func (q *outQueue) wakeWriter() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close disconnects the peer once.
func (q *outQueue) close() {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.queue = nil
		q.sizes = nil
		q.addQueued(-q.queued)
		q.mu.Unlock()
		close(q.done)
		q.cancelGone()
		q.c.Close()
		if q.onClose != nil {
			q.onClose()
		}
	})
}

// writeLoop writes queued messages until the queue is closed.
func (q *outQueue) writeLoop() {
	for {
		select {
		case <-q.done:
			return
		case <-q.wake:
		}
		for {
			q.mu.Lock()
			if len(q.queue) == 0 || q.closed || q.writing {
				// (A sender writing directly wakes us if it queues.)
				q.mu.Unlock()
				break
			}
			batch := q.queue
			q.queue = nil
			q.writing = true
			q.mu.Unlock()
			err := q.writeBatch(batch)
			q.mu.Lock()
			q.writing = false
			q.mu.Unlock()
			if err != nil {
				q.close()
				return
			}
		}
	}
}

// curveBoxAhead is how much of a batch the writer boxes before writing
// it on a CURVE connection: the first bytes go out while the rest still
// waits to be boxed, a peer gone meanwhile is not boxed for, and a batch
// is not held twice (plain and boxed) in memory.
const curveBoxAhead = 1 << 20

// writeBatch writes a batch the writer took from the queue (q.writing
// held), boxing its plain messages on the way.
func (q *outQueue) writeBatch(batch []queuedMsg) error {
	var all net.Buffers
	n := 0
	for i, m := range batch {
		w := m.wire
		if m.plain {
			var err error
			if w, _, err = q.c.curve.sealWire(w); err != nil {
				q.c.l.policy.reject("protocol-violation", q.c.peer(), err)
				return err
			}
		}
		all = append(all, w...)
		for _, b := range w {
			n += len(b)
		}
		if i < len(batch)-1 && (q.c.curve == nil || n < curveBoxAhead) {
			continue
		}
		if err := q.c.writeBuffers(all, q.written); err != nil {
			return err
		}
		all, n = nil, 0
	}
	return nil
}

// written counts n bytes of the writer's batch as written.
func (q *outQueue) written(n int) {
	q.mu.Lock()
	if !q.closed { // (else close let go of everything)
		for left := n; left > 0 && len(q.sizes) > 0; {
			d := min(left, q.sizes[0])
			q.sizes[0] -= d
			left -= d
			if q.sizes[0] == 0 {
				q.sizes = q.sizes[1:]
			}
		}
		q.addQueued(-n)
	}
	q.mu.Unlock()
}

// replyBudget bounds the unsent bytes of a set of queues (a Router's
// peers) together. When the total exceeds max, the queue with the most
// bytes waiting behind the reply it is being sent is cut off (counted
// under reason), until it fits: a peer that stops reading is the one whose
// replies pile up behind, while one that reads, or just asked for a large
// reply, has little or nothing behind it (bytes count as sent as the
// writer's writes complete, at most 1 MiB at a time). (Cutting the queue
// with the most bytes cut a client that had just asked for one large
// reply, while those that stopped reading, each under its own bound,
// stayed.) Only when nothing waits behind any head is the largest cut.
type replyBudget struct {
	max    int64
	reason string
	total  atomic.Int64
	// mu makes one enforcer decide at a time: two at once both read the
	// total past the budget, and the second, scanning after the first
	// cut its victim, cut a peer that was in nobody's way (a reader
	// with one reply).
	mu sync.Mutex
	// queues lists the queues sharing the budget.
	queues func() []*outQueue
}

// enforce cuts off the largest queues while the total exceeds the budget.
func (b *replyBudget) enforce() {
	if b.total.Load() <= b.max {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.total.Load() > b.max {
		var victim *outQueue
		var most, behind int64
		for _, q := range b.queues() {
			h, bh := q.held.Load(), q.behind.Load()
			if h > 0 && (victim == nil || bh > behind || bh == behind && h > most) {
				victim, most, behind = q, h, bh
			}
		}
		if victim == nil {
			return // only bytes being queued right now: nobody to cut off
		}
		if b.total.Load() <= b.max {
			return // (room made meanwhile: a peer gone, writes done)
		}
		victim.c.l.policy.reject(b.reason, victim.c.peer(),
			fmt.Errorf("replies waiting for all connections exceed %d bytes; this one had the most (%d bytes)", b.max, most))
		victim.close()
	}
}
