package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// PoolJob is a job and the member that holds it.
type PoolJob struct {
	// Member is the control endpoint of the job's supervisor.
	Member string
	protocol.JobInfo
}

// Spawn starts a job on the member placement chooses (see Pool). Without
// args.JobID the Pool chooses the id (tagged with the member). A member
// found down before the request reached it is passed over for the next
// one; one that went away after it may have started the job: the error is
// then a *MemberError carrying the id (ErrMemberDown).
func (p *Pool) Spawn(ctx context.Context, args protocol.SpawnArgs) (PoolJob, error) {
	if err := p.waitReady(ctx); err != nil {
		return PoolJob{}, err
	}
	chosen := args.JobID == ""
	tried := map[string]bool{}
	for {
		m, err := p.place(args.SessionID, tried)
		if err != nil {
			return PoolJob{}, err
		}
		tried[m.key] = true
		if chosen {
			args.JobID = newPoolJobID(m.tag)
		}
		m.spawning(1)
		var info protocol.JobInfo
		reached, err := p.callMember(ctx, m, args.JobID, func(ctx context.Context) error {
			var err error
			info, err = m.c.Spawn(ctx, args)
			return err
		})
		m.spawning(-1)
		if err == nil {
			m.spawned()
			if p.tagMember(tagOf(info.JobID)) != m {
				p.remember(info.JobID, m)
			}
			return PoolJob{Member: m.key, JobInfo: info}, nil
		}
		if reached || ctx.Err() != nil {
			return PoolJob{}, err
		}
		// (nothing was sent: the next member in placement's order)
	}
}

// place chooses the member for a spawn of session, passing over tried.
func (p *Pool) place(session string, tried map[string]bool) (*member, error) {
	var ups []*member
	var down []*MemberError
	for _, m := range p.memberList() {
		st := m.state()
		switch {
		case tried[m.key]:
		case !st.Up:
			down = append(down, &MemberError{Member: m.key, Err: st.Err})
		case st.Draining:
			down = append(down, &MemberError{Member: m.key, Err: errors.New("draining")})
		default:
			ups = append(ups, m)
		}
	}
	if len(ups) == 0 {
		if len(down) == 0 {
			return nil, ErrNoMembers
		}
		return nil, fmt.Errorf("%w: %w", ErrNoMembers, &PartialError{Errs: down})
	}
	byKey := map[string]*member{}
	keys := make([]string, 0, len(ups))
	loads := make([]memberLoad, 0, len(ups))
	for _, m := range ups {
		byKey[m.key] = m
		keys = append(keys, m.key)
		m.mu.Lock()
		loads = append(loads, m.load)
		m.mu.Unlock()
	}
	if session != "" {
		return byKey[rankForSession(session, keys)[0]], nil
	}
	return byKey[leastLoaded(loads)], nil
}

// spawning counts spawns in flight to m; spawned counts one answered.
func (m *member) spawning(d int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.load.inflight = max(m.load.inflight+d, 0)
}

func (m *member) spawned() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.load.active++
}

// maxKnown bounds the job ids without a tag a Pool remembers (beyond it,
// some are forgotten: they are asked for again).
const maxKnown = 1 << 16

func (p *Pool) remember(id string, m *member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.known) >= maxKnown {
		for k := range p.known {
			delete(p.known, k)
			if len(p.known) < maxKnown*3/4 {
				break
			}
		}
	}
	p.known[id] = m.key
}

func (p *Pool) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.known, id)
}

func (p *Pool) tagMember(tag string) *member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tags[tag]
}

// owner returns the member that holds the job of id (or name).
func (p *Pool) owner(ctx context.Context, id string) (*member, error) {
	if id == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "jobId is required")
	}
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if m := p.members[p.known[id]]; m != nil {
		p.mu.Unlock()
		return m, nil
	}
	if m := p.tags[tagOf(id)]; m != nil {
		p.mu.Unlock()
		return m, nil
	}
	p.mu.Unlock()
	return p.find(ctx, id)
}

// find asks every member for the job of id (or name), in memory or only
// in its output files, and remembers its id.
func (p *Pool) find(ctx context.Context, id string) (*member, error) {
	ms := p.memberList()
	var (
		mu    sync.Mutex
		found []*member
		ids   []string
		errs  []*MemberError
		wg    sync.WaitGroup
	)
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var info protocol.JobInfo
			err := p.onMember(ctx, m, id, func(ctx context.Context) error {
				var err error
				if info, err = m.c.Status(ctx, id); protocol.CodeOf(err) == protocol.CodeNotFound {
					// Not in memory: a job it forgot whose output
					// files it keeps (by id or name) is its too.
					var res protocol.PollResult
					if res, err = m.c.Poll(ctx, id, 0, 1); err == nil {
						info = res.Job
					}
				}
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			var pe *protocol.Error
			var me *MemberError
			switch {
			case err == nil:
				found, ids = append(found, m), append(ids, info.JobID)
			case errors.As(err, &pe) && pe.Code == protocol.CodeNotFound:
			case errors.As(err, &me):
				errs = append(errs, me)
			default:
				errs = append(errs, &MemberError{Member: m.key, JobID: id, Err: err})
			}
		}()
	}
	wg.Wait()
	switch {
	case len(found) == 1:
		p.remember(ids[0], found[0])
		return found[0], nil
	case len(found) > 1:
		e := &AmbiguousJobError{JobID: id}
		for _, m := range found {
			e.Members = append(e.Members, m.key)
		}
		return nil, e
	case len(errs) > 0:
		return nil, fmt.Errorf("job %s: not found on the supervisors that answered: %w", id, &PartialError{Errs: errs})
	}
	return nil, protocol.Errorf(protocol.CodeNotFound, "job %s: no supervisor of the pool knows it", id)
}

// callMember is onMember, also saying whether the request may have
// reached the member (false: it was down before the call, or the request
// never reached it whole: see ConnectError.Unsent).
func (p *Pool) callMember(ctx context.Context, m *member, jobID string, fn func(ctx context.Context) error) (reached bool, err error) {
	called, sent := false, true
	err = p.onMember(ctx, m, jobID, func(ctx context.Context) error {
		called = true
		err := fn(ctx)
		var ce *ConnectError
		if errors.As(err, &ce) && ce.Unsent {
			sent = false
		}
		return err
	})
	return called && sent, err
}

// onJob runs fn on the Client of the member that holds id.
func (p *Pool) onJob(ctx context.Context, id string, fn func(ctx context.Context, c *Client) error) (string, error) {
	m, err := p.owner(ctx, id)
	if err != nil {
		return "", err
	}
	return m.key, p.onMember(ctx, m, id, func(ctx context.Context) error { return fn(ctx, m.c) })
}

// Owner returns the Client of the member that holds the job of id (or
// name), and its control endpoint: for the ops the Pool does not wrap
// (History, Start, Open, Restart, ...), which then do not fail fast
// when it goes down.
func (p *Pool) Owner(ctx context.Context, id string) (*Client, string, error) {
	m, err := p.owner(ctx, id)
	if err != nil {
		return nil, "", err
	}
	return m.c, m.key, nil
}

// Status returns a job, from its member.
func (p *Pool) Status(ctx context.Context, id string) (PoolJob, error) {
	var info protocol.JobInfo
	key, err := p.onJob(ctx, id, func(ctx context.Context, c *Client) (err error) {
		info, err = c.Status(ctx, id)
		return err
	})
	return PoolJob{Member: key, JobInfo: info}, err
}

// Wait is Client.Wait on the job's member; it fails with a *MemberError
// (ErrMemberDown) when the member goes away meanwhile.
func (p *Pool) Wait(ctx context.Context, id string, wait time.Duration) (PoolJob, bool, error) {
	var info protocol.JobInfo
	var finished bool
	key, err := p.onJob(ctx, id, func(ctx context.Context, c *Client) (err error) {
		info, finished, err = c.Wait(ctx, id, wait)
		return err
	})
	return PoolJob{Member: key, JobInfo: info}, finished, err
}

// Follow is Client.Follow on the job's member; it fails with a
// *MemberError (ErrMemberDown) when the member goes away meanwhile (follow
// again from the next seq once it is up: Members says when).
func (p *Pool) Follow(ctx context.Context, id string, from uint64, fn FollowFunc, opts ...FollowOption) error {
	_, err := p.onJob(ctx, id, func(ctx context.Context, c *Client) error {
		return c.Follow(ctx, id, from, fn, opts...)
	})
	return err
}

// Poll is Client.Poll on the job's member.
func (p *Pool) Poll(ctx context.Context, id string, cursor, maxBytes int64) (protocol.PollResult, error) {
	var r protocol.PollResult
	_, err := p.onJob(ctx, id, func(ctx context.Context, c *Client) (err error) {
		r, err = c.Poll(ctx, id, cursor, maxBytes)
		return err
	})
	return r, err
}

// Kill is Client.Kill on the job's member.
func (p *Pool) Kill(ctx context.Context, id, signal string) (protocol.KillResult, error) {
	var r protocol.KillResult
	_, err := p.onJob(ctx, id, func(ctx context.Context, c *Client) (err error) {
		r, err = c.Kill(ctx, id, signal)
		return err
	})
	return r, err
}

// Stop is Client.Stop on the job's member.
func (p *Pool) Stop(ctx context.Context, id string) (protocol.KillResult, error) {
	var r protocol.KillResult
	_, err := p.onJob(ctx, id, func(ctx context.Context, c *Client) (err error) {
		r, err = c.Stop(ctx, id)
		return err
	})
	return r, err
}

// Write is Client.Write on the job's member.
func (p *Pool) Write(ctx context.Context, id string, data []byte, eof bool) (protocol.WriteResult, error) {
	var r protocol.WriteResult
	_, err := p.onJob(ctx, id, func(ctx context.Context, c *Client) (err error) {
		r, err = c.Write(ctx, id, data, eof)
		return err
	})
	return r, err
}

// Remove is Client.Remove on the job's member.
func (p *Pool) Remove(ctx context.Context, id string) error {
	_, err := p.onJob(ctx, id, func(ctx context.Context, c *Client) error { return c.Remove(ctx, id) })
	if err == nil {
		p.forget(id)
	}
	return err
}
