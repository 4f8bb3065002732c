package zmtp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Publisher is a ZMTP 3 PUB socket of our own, on the hardened listener.
// Unlike the engine's PUB (one unbounded queue, one subscriber at a time),
// every subscriber has its own writer and a queue bounded in bytes: a
// subscriber that falls that far behind is disconnected (and counted), so
// it can neither grow memory nor slow anyone else. It reconnects and
// recovers what it missed with the subscribe op.
type Publisher struct {
	l        *hardenedListener
	policy   *Policy
	maxQueue int
	seq      atomic.Uint64 // numbers subscribers in order of arrival

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool
	wg     sync.WaitGroup
	// freed is about what subscribers that left held since the last
	// give-back, which giveBack (once set) will make (see release).
	freed    int
	giveBack *time.Timer
	// scopes are the prefixes whose subscriptions are counted (see
	// CountPrefix); set by ListenPub, never changed.
	scopes []*Scope
	// syncWait wakes SyncSubscriptions as readers apply subscriptions.
	syncWait syncWait
}

// Memory subscribers leave behind is given back to the system once they
// have held giveBackAfter since the last time, giveBackDelay after the
// one that passed it (the others leaving with it go too): else the
// runtime keeps it until its next collection, which an idle supervisor
// makes every two minutes, and returns it slowly (1,000 subscribers at
// their bound took 107 MB, all kept 10 s after they left). A subscriber
// counts its subscriptions and subscriberBytes for its connection.
const (
	giveBackAfter   = 16 << 20
	giveBackDelay   = 2 * time.Second
	subscriberBytes = 16 << 10
)

// release notes that a subscriber holding n bytes left.
func (p *Publisher) release(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freed += n
	if p.freed < giveBackAfter || p.giveBack != nil || p.closed {
		return
	}
	p.wg.Add(1) // (Close stops it, or waits for it)
	p.giveBack = time.AfterFunc(giveBackDelay, func() {
		defer p.wg.Done()
		p.mu.Lock()
		p.freed, p.giveBack = 0, nil
		p.mu.Unlock()
		debug.FreeOSMemory()
	})
}

// ListenPub opens a Publisher on endpoint (tcp or ipc) with policy p;
// each subscriber may have up to queueBytes of unsent messages.
func ListenPub(ctx context.Context, endpoint string, p *Policy, queueBytes int, opts ...PubOption) (*Publisher, error) {
	l, pol, err := listenHardened(endpoint, p, []string{"SUB", "XSUB"})
	if err != nil {
		return nil, err
	}
	if queueBytes <= 0 {
		queueBytes = 16 << 20
	}
	pub := &Publisher{l: l, policy: pol, maxQueue: queueBytes, subs: map[*subscriber]struct{}{}}
	for _, o := range opts {
		o(pub)
	}
	evict := pub.evictBusiestPeer
	l.evict.Store(&evict)
	pub.wg.Add(1)
	go pub.acceptLoop()
	return pub, nil
}

// Addr returns the bound address.
func (p *Publisher) Addr() net.Addr { return p.l.Addr() }

// Subscribers returns the number of connected subscribers.
func (p *Publisher) Subscribers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.subs)
}

// evictBusiestPeer makes room for a new subscriber from peer key at the
// connection limit. Subscribers are idle by nature (they only receive), so
// the rule is about fairness instead: the oldest subscriber of the peer
// holding the most (the newcomer's own, when it is among the busiest) is
// closed, if that peer holds at least two. A peer that leaks connections
// then only ever replaces its own (over tcp a peer is an address: clients
// behind one address churn each other's rather than lock later ones out),
// and a full house of one connection per peer refuses the newcomer rather
// than churn.
func (p *Publisher) evictBusiestPeer(key string) bool {
	p.mu.Lock()
	count := map[string]int{}
	for s := range p.subs {
		count[s.c.peerKey]++
	}
	busiest, most := "", 0
	for k, n := range count {
		if n > most || (n == most && k < busiest) {
			busiest, most = k, n
		}
	}
	if n := count[key]; n >= 2 && n == most {
		busiest = key // (its own, when it is among the busiest)
	}
	if most < 2 {
		p.mu.Unlock()
		return false
	}
	var victim *subscriber
	for s := range p.subs {
		if s.c.peerKey == busiest && (victim == nil || s.seq < victim.seq) {
			victim = s
		}
	}
	p.mu.Unlock()
	p.policy.reject("evicted-busiest-peer", victim.c.peer(),
		fmt.Errorf("oldest of the %d subscribers of %s, given up for a new connection at the limit of %d", most, busiest, p.policy.MaxConns))
	victim.close()
	return true
}

// Close disconnects every subscriber and stops listening.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.giveBack != nil && p.giveBack.Stop() {
		p.wg.Done() // (it will not run)
	}
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	err := p.l.Close()
	p.l.wg.Wait()
	for _, s := range subs {
		s.close()
	}
	p.wg.Wait()
	return err
}

func (p *Publisher) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		hc := c.(*hardenedConn)
		p.wg.Add(1)
		go p.serve(hc)
	}
}

// serve completes the handshake and runs the subscriber's reader; its
// writer runs alongside.
func (p *Publisher) serve(c *hardenedConn) {
	defer p.wg.Done()
	seq := p.seq.Add(1) // (in order of arrival)
	if err := handshake(c, p.policy, "PUB"); err != nil {
		if !c.rejected { // (else counted with its reason)
			p.policy.reject("handshake", c.peer(), err)
		}
		c.Close()
		return
	}
	s := &subscriber{pub: p, seq: seq}
	s.sync.replayed = int64(len(c.replay)) // (before the reader, and before SyncSubscriptions sees s)
	s.outQueue = newOutQueue(c, p.maxQueue, "slow-subscriber", func() {
		p.mu.Lock()
		delete(p.subs, s)
		p.mu.Unlock()
		if p.policy.OnDisconnect != nil {
			p.policy.OnDisconnect()
		}
	})
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(1)
	go func() { defer p.wg.Done(); s.writeLoop() }()
	s.readLoop()
	s.close()
	s.tmu.Lock()
	held := s.topicBytes + subscriberBytes
	s.dropTopicsLocked()
	s.tmu.Unlock()
	p.release(held)
}

func metadata(kv ...string) []byte {
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		b = append(b, byte(len(kv[i])))
		b = append(b, kv[i]...)
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(kv[i+1])))
		b = append(append(b, l[:]...), kv[i+1]...)
	}
	return b
}

func writeCommand(w io.Writer, name string, body []byte) error {
	b := append([]byte{byte(len(name))}, name...)
	_, err := w.Write(encodeFrame(flagCommand, append(b, body...)))
	return err
}

func encodeFrame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		h := make([]byte, 9, 9+len(body))
		h[0] = flags | flagLong
		binary.BigEndian.PutUint64(h[1:], uint64(len(body)))
		return append(h, body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// readFrame reads one frame of at most max bytes, refused before anything
// is allocated for it (on the server side the hardened connection has
// bounded it earlier still).
func readFrame(r io.Reader, max uint64) (byte, []byte, error) {
	return readFrameInto(r, max, nil)
}

// readFrameInto is readFrame reading the body into buf's storage when it
// fits (the body is then only good until buf is used again).
func readFrameInto(r io.Reader, max uint64, buf []byte) (byte, []byte, error) {
	var hdr [9]byte
	if _, err := io.ReadFull(r, hdr[:2]); err != nil {
		return 0, nil, err
	}
	size := uint64(hdr[1])
	if hdr[0]&flagLong != 0 {
		if _, err := io.ReadFull(r, hdr[2:9]); err != nil {
			return 0, nil, err
		}
		size = binary.BigEndian.Uint64(hdr[1:9])
	}
	if size > max {
		return 0, nil, fmt.Errorf("frame of %d bytes: refusing (the limit is %d)", size, max)
	}
	body := buf[:0]
	if uint64(cap(body)) < size {
		body = make([]byte, size)
	}
	body = body[:size]
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return hdr[0], body, nil
}

// SendParts queues a two-frame message [topic, body] where body is the
// concatenation of parts, without copying them (writev). The parts must
// not be modified afterwards.
func (p *Publisher) SendParts(topic []byte, parts ...[]byte) error {
	n := 0
	for _, b := range parts {
		n += len(b)
	}
	var th, bh []byte
	th = append(th, flagMore, byte(len(topic)))
	if len(topic) > 255 {
		return errors.New("topic longer than 255 bytes")
	}
	if n > 255 {
		bh = make([]byte, 9)
		bh[0] = flagLong
		binary.BigEndian.PutUint64(bh[1:], uint64(n))
	} else {
		bh = []byte{0, byte(n)}
	}
	wire := make(net.Buffers, 0, 3+len(parts))
	wire = append(wire, th, topic, bh)
	wire = append(wire, parts...)
	p.fanout(topic, wire, len(th)+len(topic)+len(bh)+n)
	return nil
}

// fanout queues an encoded message for every subscriber of topic.
func (p *Publisher) fanout(topic []byte, wire net.Buffers, size int) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		if s.matches(topic) {
			s.enqueue(wire, size)
		}
	}
}

// Send queues the message of frames for every subscriber whose
// subscriptions match its first frame (the topic). It never blocks: a
// subscriber whose queue would exceed its bound is disconnected instead.
func (p *Publisher) Send(frames ...[]byte) error {
	if len(frames) == 0 {
		return errors.New("empty message")
	}
	wire, size := encodeMessage(frames)
	p.fanout(frames[0], wire, size)
	return nil
}

type subscriber struct {
	*outQueue
	pub *Publisher
	seq uint64 // order of connection (oldest first)
	// sync is the reader's progress, for SyncSubscriptions.
	sync subSync

	tmu    sync.Mutex
	topics [][]byte
	// topicBytes is what topics take, as subscriptionCost counts it.
	topicBytes int
}

func (s *subscriber) matches(topic []byte) bool {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	for _, t := range s.topics {
		if bytes.HasPrefix(topic, t) {
			return true
		}
	}
	return false
}

// MaxSubscriptions, MaxTopicBytes and MaxSubscriptionBytes bound one
// subscriber's subscriptions (every published message is matched against
// each of them: a subscriber adding them without end slowed publishing for
// everyone and grew the supervisor's memory; 1,000 subscribers of 1,024
// topics of 256 bytes took 420 MB). Past them it is disconnected (reason
// too-many-subscriptions). MaxSubscriptionBytes bounds them together, each
// counted with subscriptionOverhead: 1,024 job topics fit.
const (
	MaxSubscriptions     = 1024
	MaxTopicBytes        = 256
	MaxSubscriptionBytes = 64 << 10
	subscriptionOverhead = 32 // (its slice header and allocation)
)

// readLoop applies subscriptions: a message frame starting with 1
// (subscribe) or 0 (cancel), or the ZMTP 3.1 SUBSCRIBE/CANCEL commands.
func (s *subscriber) readLoop() {
	defer func() {
		s.sync.done.Store(true)
		s.pub.syncWait.progress()
	}()
	for {
		s.settled()
		flags, body, err := s.c.readMsgFrame(subReader{s})
		if err != nil {
			return
		}
		var sub bool
		var topic []byte
		switch {
		case flags&flagCommand != 0:
			name, rest := cmdName(body)
			switch name {
			case cmdSubscribe:
				sub, topic = true, rest
			case cmdCancel:
				topic = rest
			default:
				continue // PING and friends: nothing to do
			}
		case len(body) > 0 && (body[0] == 0 || body[0] == 1):
			sub, topic = body[0] == 1, body[1:]
		default:
			continue
		}
		s.tmu.Lock()
		cost := len(topic) + subscriptionOverhead
		if sub && (len(s.topics) >= MaxSubscriptions || len(topic) > MaxTopicBytes || s.topicBytes+cost > MaxSubscriptionBytes) {
			n, held := len(s.topics), s.topicBytes
			s.dropTopicsLocked() // (given back now: the connection is done)
			s.tmu.Unlock()
			s.c.l.policy.reject("too-many-subscriptions", s.c.peer(),
				fmt.Errorf("subscription %d of %d bytes, %d held (at most %d, of at most %d bytes, %d in all)",
					n+1, len(topic), held, MaxSubscriptions, MaxTopicBytes, MaxSubscriptionBytes))
			return
		}
		if sub {
			s.topics = append(s.topics, append([]byte(nil), topic...))
			s.topicBytes += cost
			s.count(topic, 1)
		} else {
			for i, t := range s.topics {
				if bytes.Equal(t, topic) {
					s.topics = append(s.topics[:i], s.topics[i+1:]...)
					s.topicBytes -= cost
					s.count(topic, -1)
					break
				}
			}
		}
		s.tmu.Unlock()
	}
}

// encodeMessage frames a multipart message for writev: headers are built
// once, frames are not copied (so the caller must not modify them after
// sending). size is the total on the wire.
func encodeMessage(frames [][]byte) (net.Buffers, int) {
	wire := make(net.Buffers, 0, 2*len(frames))
	size := 0
	for i, f := range frames {
		var fl byte
		if i < len(frames)-1 {
			fl = flagMore
		}
		if len(f) > 255 {
			h := make([]byte, 9)
			h[0] = fl | flagLong
			binary.BigEndian.PutUint64(h[1:], uint64(len(f)))
			wire = append(wire, h)
			size += 9
		} else {
			wire = append(wire, []byte{fl, byte(len(f))})
			size += 2
		}
		wire = append(wire, f)
		size += len(f)
	}
	return wire, size
}
