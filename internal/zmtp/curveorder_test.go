package zmtp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCurveRouterConcurrentRepliesInOrder: replies to one CURVE peer sent
// from several goroutines at once, of sizes either side of curveDirectMax
// (boxed and written by a sender, part written and the rest queued, or
// boxed by the writer in its batch), all arrive and open: their nonces go
// up in the order the frames are on the wire whoever boxes them; each
// sender's replies arrive in its order; and the unsent byte count goes
// back to zero (what was counted when queued is what was written).
func TestCurveRouterConcurrentRepliesInOrder(t *testing.T) {
	s := newCurveSetup(t)
	pol := s.policy()
	pol.WriteTimeout = 30 * time.Second // (a race-built reader on a loaded machine)
	r, err := ListenRouter(context.Background(), "tcp://127.0.0.1:0", pol, 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := s.dial(t, "DEALER", "tcp://"+r.Addr().String(), s.client, s.server.Public)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	in, err := r.Recv()
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{0, 10, 222, 223, curveDirectMax - 200, curveDirectMax - 33, curveDirectMax - 32, curveDirectMax, 100 << 10, 3, 700 << 10}
	const senders, each = 4, 150
	body := func(g, i int) []byte {
		b := bytes.Repeat([]byte{byte(g*31 + i)}, sizes[(g+i)%len(sizes)])
		return b
	}
	var wg sync.WaitGroup
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var id [8]byte
				binary.BigEndian.PutUint32(id[:], uint32(g))
				binary.BigEndian.PutUint32(id[4:], uint32(i))
				if err := r.Send(in.Peer, [][]byte{id[:], body(g, i)}); err != nil {
					return // (the reader reports what is missing)
				}
			}
		}()
	}
	defer wg.Wait()
	next := make([]int, senders)
	for k := 0; k < senders*each; k++ {
		m, err := c.Recv()
		if err != nil {
			t.Fatalf("reply %d: %v (rejects %v)", k, err, s.rejects.snapshot())
		}
		if len(m) != 2 || len(m[0]) != 8 {
			t.Fatalf("reply %d: %d frames", k, len(m))
		}
		g, i := int(binary.BigEndian.Uint32(m[0])), int(binary.BigEndian.Uint32(m[0][4:]))
		if g >= senders || i != next[g] || !bytes.Equal(m[1], body(g, i)) {
			t.Fatalf("reply %d: sender %d's %d (want its %d), %d bytes", k, g, i, next[g], len(m[1]))
		}
		next[g]++
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for in.Peer.held.Load() != 0 || r.budget.total.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("all read, yet %d bytes held (budget total %d)", in.Peer.held.Load(), r.budget.total.Load())
		}
		time.Sleep(time.Millisecond) // (written() runs after the write returns)
	}
	if got := s.rejects.snapshot(); len(got) != 0 {
		t.Fatalf("peers rejected: %v", got)
	}
}

// TestCurvePubCloseMidBatch: CURVE subscribers that go away while the
// writer boxes and writes large batches for them (and the publisher
// closing with batches queued) leave the others served, nothing held,
// and no race.
func TestCurvePubCloseMidBatch(t *testing.T) {
	s := newCurveSetup(t)
	pol := s.policy()
	pol.WriteTimeout = 30 * time.Second
	p, err := ListenPub(context.Background(), "tcp://127.0.0.1:0", pol, 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	subs := subscribers(t, p, "t", 3, func() (*Client, error) {
		return s.dial(t, "SUB", "tcp://"+p.Addr().String(), s.client, s.server.Public)
	})
	big := bytes.Repeat([]byte("b"), 1<<20)
	const n = 60
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			var id [4]byte
			binary.BigEndian.PutUint32(id[:], uint32(i))
			if i%3 == 0 {
				_ = p.SendParts([]byte("t"), id[:], big)
			} else {
				_ = p.SendParts([]byte("t"), id[:])
			}
		}
	}()
	defer wg.Wait()
	// Subscriber 0 reads two messages and goes; 1 never reads and goes;
	// 2 reads everything.
	for i := 0; i < 2; i++ {
		if _, err := subs[0].Recv(); err != nil {
			t.Fatal(err)
		}
	}
	subs[0].Close()
	subs[1].Close()
	for i := 0; i < n; i++ {
		m, err := subs[2].Recv()
		if err != nil {
			t.Fatalf("message %d: %v (rejects %v)", i, err, s.rejects.snapshot())
		}
		if got := int(binary.BigEndian.Uint32(m[1])); len(m) != 2 || got != i {
			t.Fatal(fmt.Sprintf("message %d: got %d", i, got))
		}
	}
	wg.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for p.subscribedN("t") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscribers left, want 1", p.subscribedN("t"))
		}
		time.Sleep(time.Millisecond) // (no notification for a subscriber gone)
	}
}

// TestCurvePubDirectPartThenQueued: a subscriber that stops reading while
// small messages are published one after the other takes them as the
// sender's direct writes until its socket is full; the one that fills it
// is part written or not at all (its boxed rest queued at the head), and
// the next are queued unboxed for the writer, larger ones among them.
// When it reads again everything arrives, opens and is in order; several
// rounds, each from an idle queue.
func TestCurvePubDirectPartThenQueued(t *testing.T) {
	s := newCurveSetup(t)
	pol := s.policy()
	pol.WriteTimeout = 60 * time.Second // (nobody reads during a round)
	p, c := s.pubSub(t, pol, 512<<20)
	subscribeAndWait(t, p, c, "t")
	p.mu.Lock()
	var q *outQueue
	for sub := range p.subs {
		q = sub.outQueue
	}
	p.mu.Unlock()
	// Small ones (boxed, at most curveDirectMax) until the socket is
	// full (then the writer has it), a large one now and then after.
	sizes := []int{curveDirectMax - 200, 1000, curveDirectMax - 83, 0, 5000, 222, curveDirectMax + 1}
	size := func(i int) int {
		if i%len(sizes) == len(sizes)-1 && i%1000 < 900 {
			return 7
		}
		return sizes[i%len(sizes)]
	}
	seq := 0
	for round := 0; round < 4; round++ {
		// Idle: the writer is done with the last round.
		deadline := time.Now().Add(10 * time.Second)
		for {
			q.mu.Lock()
			idle := !q.writing && len(q.queue) == 0
			q.mu.Unlock()
			if idle {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the writer never went idle")
			}
			time.Sleep(time.Millisecond) // (no notification for it)
		}
		// 24 MiB: more than loopback's socket buffers take.
		first := seq
		for sent := 0; sent < 24<<20; seq++ {
			var id [4]byte
			binary.BigEndian.PutUint32(id[:], uint32(seq))
			if err := p.SendParts([]byte("t"), id[:], bytes.Repeat([]byte{byte(seq)}, size(seq))); err != nil {
				t.Fatal(err)
			}
			sent += size(seq) + 4
		}
		for i := first; i < seq; i++ {
			m, err := c.Recv()
			if err != nil {
				t.Fatalf("round %d, message %d: %v (rejects %v)", round, i, err, s.rejects.snapshot())
			}
			if len(m) != 2 || len(m[1]) != size(i)+4 || int(binary.BigEndian.Uint32(m[1])) != i {
				t.Fatalf("round %d, message %d: %d frames, %d bytes", round, i, len(m), len(m[len(m)-1]))
			}
		}
	}
}
