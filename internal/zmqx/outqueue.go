package zmqx

import (
	"fmt"
	"net"
	"sync"
)

// outQueue is the writing half of one peer connection of our ROUTER or
// PUB: messages are queued without blocking the sender, a goroutine of its
// own writes them (batched, writev), and a peer whose unsent bytes would
// exceed max is disconnected rather than allowed to grow memory or slow
// anyone else.
type outQueue struct {
	c       *hardenedConn
	max     int
	reason  string // rejection reason when the bound is exceeded
	onClose func() // called once, after the connection is closed

	mu     sync.Mutex
	queue  []net.Buffers
	queued int
	closed bool
	wake   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func newOutQueue(c *hardenedConn, max int, reason string, onClose func()) *outQueue {
	return &outQueue{c: c, max: max, reason: reason, onClose: onClose, wake: make(chan struct{}, 1), done: make(chan struct{})}
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
	q.queue = append(q.queue, wire)
	q.queued += size
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return true
}

// close disconnects the peer once.
func (q *outQueue) close() {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.queue, q.queued = nil, 0
		q.mu.Unlock()
		close(q.done)
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
			if len(q.queue) == 0 || q.closed {
				q.mu.Unlock()
				break
			}
			batch := q.queue
			q.queue, q.queued = nil, 0
			q.mu.Unlock()
			var all net.Buffers
			for _, w := range batch {
				all = append(all, w...)
			}
			if err := q.c.writeBuffers(all); err != nil {
				q.close()
				return
			}
		}
	}
}
