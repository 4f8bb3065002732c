package zmtp

import (
	"bytes"
	"net"
	"sync/atomic"
)

// Scopes: a Publisher may count the subscriptions under a topic prefix,
// for messages only the subscribers of that prefix want (another
// encoding of the same events, say): asking whether anyone wants them
// is then one atomic load, and they go only to those subscribers.

// PubOption configures a Publisher (see ListenPub).
type PubOption func(*Publisher)

// CountPrefix makes the Publisher count the subscriptions, of all its
// subscribers, that begin with prefix: Scope(prefix) then tells without a
// lock whether anyone holds one, and SendScoped delivers to them only.
// For an encoding of events that only some subscribers want (their
// topics say which): nobody pays for it while nobody subscribes.
func CountPrefix(prefix string) PubOption {
	return func(p *Publisher) { p.scopes = append(p.scopes, &Scope{prefix: []byte(prefix)}) }
}

// Scope is a topic prefix a Publisher counts subscriptions under.
type Scope struct {
	prefix []byte
	n      atomic.Int64
}

// Active reports whether a subscriber holds a subscription that begins
// with the scope's prefix (false for a nil Scope).
func (sc *Scope) Active() bool { return sc != nil && sc.n.Load() > 0 }

// Count returns how many subscriptions begin with the scope's prefix
// (one subscriber's repeated subscription counts each time).
func (sc *Scope) Count() int64 {
	if sc == nil {
		return 0
	}
	return sc.n.Load()
}

// Scope returns the counted scope of prefix (see CountPrefix), or nil.
func (p *Publisher) Scope(prefix string) *Scope {
	for _, sc := range p.scopes {
		if string(sc.prefix) == prefix {
			return sc
		}
	}
	return nil
}

// SendScoped queues [topic, body()] for every subscriber holding a
// subscription that begins with sc's prefix and matches topic; other
// subscriptions (the empty one, say) do not get it. body is called at
// most once, and only when there is such a subscriber; a nil body sends
// nothing. It never blocks (see Send).
func (p *Publisher) SendScoped(sc *Scope, topic []byte, body func() []byte) {
	if !sc.Active() || len(topic) > 255 {
		return
	}
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	var wire net.Buffers
	size := 0
	for _, s := range subs {
		if !s.matchesIn(sc.prefix, topic) {
			continue
		}
		if wire == nil {
			b := body()
			if b == nil {
				return
			}
			wire, size = encodeMessage([][]byte{topic, b})
		}
		s.enqueue(wire, size)
	}
}

// count adds d to the count of every scope topic is in.
func (s *subscriber) count(topic []byte, d int64) {
	for _, sc := range s.pub.scopes {
		if bytes.HasPrefix(topic, sc.prefix) {
			sc.n.Add(d)
		}
	}
}

// dropTopicsLocked forgets every subscription (s.tmu held).
func (s *subscriber) dropTopicsLocked() {
	for _, t := range s.topics {
		s.count(t, -1)
	}
	s.topics, s.topicBytes = nil, 0
}

// matchesIn reports whether a subscription of s that begins with scope
// matches topic.
func (s *subscriber) matchesIn(scope, topic []byte) bool {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	for _, t := range s.topics {
		if bytes.HasPrefix(t, scope) && bytes.HasPrefix(topic, t) {
			return true
		}
	}
	return false
}
