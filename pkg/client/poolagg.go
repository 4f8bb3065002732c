package client

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// ListJobs lists the jobs of every member (Client.ListJobs with args on
// each, at once), oldest first, each with its member. Members down, or
// failing the call, are left out: their errors come in a *PartialError
// beside the others' jobs.
func (p *Pool) ListJobs(ctx context.Context, args protocol.ListJobsArgs) ([]PoolJob, error) {
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		all  []PoolJob
		errs []*MemberError
	)
	p.eachMember(func(m *member) {
		var jobs []protocol.JobInfo
		err := p.onMember(ctx, m, "", func(ctx context.Context) (err error) {
			jobs, err = m.c.ListJobs(ctx, args)
			return err
		})
		mu.Lock()
		defer mu.Unlock()
		for _, j := range jobs { // (a partial listing too: the pages that came)
			all = append(all, PoolJob{Member: m.key, JobInfo: j})
		}
		if err != nil {
			errs = append(errs, asMemberError(m, err))
		}
	})
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].CreatedAt != all[j].CreatedAt {
			return all[i].CreatedAt < all[j].CreatedAt
		}
		if all[i].Member != all[j].Member {
			return all[i].Member < all[j].Member
		}
		return all[i].JobID < all[j].JobID
	})
	return all, partial(errs)
}

// MemberHealth is one member's health, or why it has none.
type MemberHealth struct {
	Member string // control endpoint
	Health protocol.HealthResult
	Err    error // a *MemberError
}

// Health asks every member's health at once (down ones too: one may be
// back), by control endpoint. A member that fails it counts as down, and
// its error comes in a *PartialError too.
func (p *Pool) Health(ctx context.Context) ([]MemberHealth, error) {
	if err := p.waitReady(ctx); err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		out  []MemberHealth
		errs []*MemberError
	)
	p.eachMember(func(m *member) {
		h, err := m.probe.Health(ctx) // (one dial attempt: a member down answers at once)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				m.notAnswering(err)
			}
		case h.OK:
			m.setUp(h.ActiveJobs, h.QueuedJobs, h.MaxJobs, h.Draining)
		}
		mu.Lock()
		defer mu.Unlock()
		mh := MemberHealth{Member: m.key, Health: h}
		if err != nil {
			me := asMemberError(m, err)
			mh.Err = me
			errs = append(errs, me)
		}
		out = append(out, mh)
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Member < out[j].Member })
	return out, partial(errs)
}

// eachMember runs fn for every member at once, and waits for them.
func (p *Pool) eachMember(fn func(m *member)) {
	var wg sync.WaitGroup
	for _, m := range p.memberList() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(m)
		}()
	}
	wg.Wait()
}

func asMemberError(m *member, err error) *MemberError {
	var me *MemberError
	if errors.As(err, &me) {
		return me
	}
	return &MemberError{Member: m.key, Err: err}
}

// partial is a *PartialError of errs, nil without any.
func partial(errs []*MemberError) error {
	if len(errs) == 0 {
		return nil
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Member < errs[j].Member })
	return &PartialError{Errs: errs}
}
