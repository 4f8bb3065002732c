package zmtp

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Subscriptions in force before a publication (SyncSubscriptions).
//
// A client subscribes on its SUB connection and then sends a request on
// another connection: OpenClaw's gateway subscribes to exec:<jobId>, then
// spawns the job, and wants the job's first event. Its library writes the
// subscription out first, so by the time the request is read the
// subscription is in the SUB connection's receive queue; but the
// subscriber's reader may not have applied it yet, and what the request
// publishes at once would reach nobody (it did, one spawn in ten or so).
// SyncSubscriptions waits until every subscriber's reader has applied
// what its connection had received.

// subSync is a subscriber's reader's progress, for SyncSubscriptions.
type subSync struct {
	// read counts the bytes the reader took from the connection
	// (handshake bytes replayed included).
	read atomic.Int64
	// applied is read as of the last frame the reader finished with.
	applied atomic.Int64
	// replayed is how many bytes the connection had left to replay from
	// the handshake when the reader started (set before it starts).
	replayed int64
	done     atomic.Bool
}

// syncWait is the Publisher's side: readers wake waiters through it.
type syncWait struct {
	waiters atomic.Int32
	mu      sync.Mutex
	ch      chan struct{} // closed at the next progress of any reader
}

// progress wakes the waiters, if any, after a reader's progress.
func (w *syncWait) progress() {
	if w.waiters.Load() == 0 {
		return
	}
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
}

func (w *syncWait) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// subReader counts what the subscriber's reader reads.
type subReader struct{ s *subscriber }

func (r subReader) Read(p []byte) (int, error) {
	n, err := r.s.c.Read(p)
	r.s.sync.read.Add(int64(n))
	return n, err
}

// settled notes that every frame read so far has been applied (the
// reader is about to read the next one).
func (s *subscriber) settled() {
	s.sync.applied.Store(s.sync.read.Load())
	s.pub.syncWait.progress()
}

// received returns what the reader will have read once it has taken
// what the connection holds now, and whether that is more than it has
// applied. (read is loaded before the queue's length: bytes read in
// between are counted once, at worst making the wait end a frame early.)
func (s *subscriber) received() (int64, bool) {
	read := s.sync.read.Load()
	queued := max(s.sync.replayed-read, 0)
	if s.c.raw != nil {
		var inq int
		if err := s.c.raw.Control(func(fd uintptr) { inq, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err == nil {
			queued += int64(inq)
		}
	}
	// (nothing queued: a reader in the middle of a frame waits for bytes
	// not sent yet, which no wait here would bring)
	return read + queued, queued > 0
}

// SyncSubscriptions waits until every subscriber has applied the
// subscriptions (and cancels) its connection had received when it was
// called, or d has passed (then it returns false: a subscriber sending
// part of a frame and no more cannot hold a caller longer). Publishing
// after it, a message reaches a client that subscribed before sending
// the request that caused it on another connection.
func (p *Publisher) SyncSubscriptions(d time.Duration) bool {
	type owed struct {
		s    *subscriber
		upTo int64
	}
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	var wait []owed
	for _, s := range subs {
		if upTo, more := s.received(); more && s.sync.applied.Load() < upTo {
			wait = append(wait, owed{s, upTo})
		}
	}
	if len(wait) == 0 {
		return true
	}
	p.syncWait.waiters.Add(1)
	defer p.syncWait.waiters.Add(-1)
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		ch := p.syncWait.next() // (before the check: progress after it closes ch)
		wait = slices.DeleteFunc(wait, func(o owed) bool {
			return o.s.sync.done.Load() || o.s.sync.applied.Load() >= o.upTo
		})
		if len(wait) == 0 {
			return true
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		}
	}
}
