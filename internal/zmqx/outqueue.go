package zmqx

import (
	"context"
	"fmt"
	"net"
	"sync"
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
type outQueue struct {
	c       *hardenedConn
	max     int
	reason  string // rejection reason when the bound is exceeded
	onClose func() // called once, after the connection is closed

	mu     sync.Mutex
	queue  []net.Buffers
	queued int
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

func newOutQueue(c *hardenedConn, max int, reason string, onClose func()) *outQueue {
	gone, cancel := context.WithCancel(context.Background())
	return &outQueue{c: c, max: max, reason: reason, onClose: onClose, wake: make(chan struct{}, 1), done: make(chan struct{}),
		gone: gone, cancelGone: cancel}
}

// enqueue queues an encoded message; it reports false (and disconnects the
// peer) when the peer is closed or too far behind.
func (q *outQueue) enqueue(wire net.Buffers, size int) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if q.queued+size > q.max {
		q.mu.Unlock()
		q.c.l.policy.reject(q.reason, q.c.RemoteAddr().String(), fmt.Errorf("more than %d bytes waiting", q.max))
		q.close()
		return false
	}
	if len(q.queue) == 0 && !q.writing {
		q.writing = true
		q.mu.Unlock()
		return q.writeDirect(wire)
	}
	q.queue = append(q.queue, wire)
	q.queued += size
	q.mu.Unlock()
	q.wakeWriter()
	return true
}

// writeDirect writes what the socket takes of wire without waiting
// (q.writing is held) and queues the rest for the writer.
func (q *outQueue) writeDirect(wire net.Buffers) bool {
	rest, err := q.c.tryWriteBuffers(wire)
	q.mu.Lock()
	q.writing = false
	if err != nil {
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
		q.queue = append([]net.Buffers{rest}, q.queue...)
		q.queued += n
	}
	more := len(q.queue) > 0
	q.mu.Unlock()
	if more {
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
		q.queue, q.queued = nil, 0
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
			q.queue, q.queued = nil, 0
			q.writing = true
			q.mu.Unlock()
			var all net.Buffers
			for _, w := range batch {
				all = append(all, w...)
			}
			err := q.c.writeBuffers(all)
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
