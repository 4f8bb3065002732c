package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// member is one supervisor of a Pool: a Client for the caller's calls, a
// second one for health requests (one dial attempt, a short timeout, so
// that a member gone is seen at once), and what its health said.
type member struct {
	key, event, tag string
	c, probe        *Client

	mu      sync.Mutex
	up      bool
	err     error         // why it is down
	downCh  chan struct{} // closed when it goes down; a new one when it comes up
	load    memberLoad
	drain   bool
	checked bool // a health round saw it
}

func newMember(pm PoolMember, tmpl Options, probeTimeout time.Duration) *member {
	o := tmpl
	o.ControlAddress, o.EventAddress = pm.Control, pm.Event
	po := o
	po.MaxReconnectAttempts, po.RequestTimeout = 1, probeTimeout
	po.DialTimeout = min(o.DialTimeout, probeTimeout)
	return &member{key: pm.Control, event: pm.Event, tag: memberTag(pm.Control), c: New(o), probe: New(po),
		downCh: make(chan struct{}), load: memberLoad{key: pm.Control}}
}

func (m *member) close() {
	m.setDown(fmt.Errorf("%w: removed from the pool", ErrMemberDown))
	m.c.Close()
	m.probe.Close()
}

func (m *member) state() MemberState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemberState{Member: m.key, Event: m.event, Up: m.up, Err: m.err, ActiveJobs: m.load.active,
		QueuedJobs: m.load.queued, MaxJobs: m.load.maxJobs, Draining: m.drain}
}

// isUp reports whether the member is up, and why not.
func (m *member) isUp() (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.up, m.err
}

// setDown marks the member down for err (wrapping ErrMemberDown): calls
// on it in progress are ended (see onMember).
func (m *member) setDown(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checked = true
	if !errors.Is(err, ErrMemberDown) {
		err = fmt.Errorf("%w: %w", ErrMemberDown, err)
	}
	m.err = err
	if m.up {
		m.up = false
		close(m.downCh)
	}
	m.load.inflight = 0
}

// notAnswering marks the member down for err, a health request that
// failed, and closes its Client's control connection: calls in progress
// on it end at once (a stopped supervisor keeps the connection open, and
// a wait given up would wait for its cancel to be confirmed).
func (m *member) notAnswering(err error) {
	m.setDown(err)
	m.c.dropConn()
}

func (m *member) setUp(active, queued, maxJobs int, draining bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checked = true
	if !m.up {
		m.up, m.err = true, nil
		m.downCh = make(chan struct{})
	}
	m.load.active, m.load.queued, m.load.maxJobs, m.drain = active, queued, maxJobs, draining
}

// probeTimeout bounds a health request of the Pool's: half of
// RequestTimeout, at most 5 s, at least 100 ms.
func (p *Pool) probeTimeout() time.Duration {
	return max(min(p.opts.Client.RequestTimeout/2, 5*time.Second), 100*time.Millisecond)
}

// healthRound asks every member's health at once and records the answers.
func (p *Pool) healthRound(life context.Context) {
	ms := p.memberList()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(life, p.probeTimeout())
			defer cancel()
			h, err := m.probe.Health(ctx)
			switch {
			case life.Err() != nil: // (the Pool is closing: no verdict)
			case err != nil:
				m.notAnswering(err)
			case !h.OK:
				m.setDown(errors.New("health says not ok"))
			default:
				m.setUp(h.ActiveJobs, h.QueuedJobs, h.MaxJobs, h.Draining)
			}
		}()
	}
	wg.Wait()
}

// onMember runs fn, a call on member m about jobID, under a context that
// ends when m goes down: its error then is a *MemberError wrapping
// ErrMemberDown (within RequestTimeout of the member going away, as its
// health fails). A connection error of the call marks m down at once.
func (p *Pool) onMember(ctx context.Context, m *member, jobID string, fn func(ctx context.Context) error) error {
	m.mu.Lock()
	up, why, downCh := m.up, m.err, m.downCh
	m.mu.Unlock()
	if !up {
		if why == nil {
			why = fmt.Errorf("%w: not answered health yet", ErrMemberDown)
		}
		return &MemberError{Member: m.key, JobID: jobID, Err: why}
	}
	cctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { // (ended by cancel below, waited for)
		defer close(watched)
		select {
		case <-downCh:
			cancel()
		case <-cctx.Done():
		}
	}()
	err := fn(cctx)
	cancel()
	<-watched
	if err == nil {
		return nil
	}
	if ctx.Err() == nil {
		select {
		case <-downCh:
			_, why := m.isUp()
			return &MemberError{Member: m.key, JobID: jobID, Err: fmt.Errorf("%w (%v)", why, err)}
		default:
		}
	}
	var ce *ConnectError
	if errors.As(err, &ce) && !errors.Is(err, ErrClosed) {
		m.setDown(err)
		return &MemberError{Member: m.key, JobID: jobID, Err: fmt.Errorf("%w: %w", ErrMemberDown, err)}
	}
	return &MemberError{Member: m.key, JobID: jobID, Err: err}
}
