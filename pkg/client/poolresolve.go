package client

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"time"
)

// run is the Pool's one goroutine (owned by it: Close stops it and waits):
// it looks the members up (DNS) every ResolveInterval and asks their
// health every HealthInterval.
func (p *Pool) run() {
	defer close(p.done)
	life := p.life

	var nextResolve time.Time
	first := true
	tick := time.NewTicker(p.opts.HealthInterval)
	defer tick.Stop()
	for {
		if p.opts.DNS != nil && !time.Now().Before(nextResolve) {
			p.resolve(life)
			nextResolve = time.Now().Add(p.opts.ResolveInterval)
		}
		p.healthRound(life)
		if first {
			close(p.ready)
			first = false
		}
		select {
		case <-p.quit:
			return
		case <-tick.C:
		}
	}
}

// resolve looks the DNS name up and makes its addresses the members. A
// failed or empty lookup keeps the members as they are (a DNS hiccup does
// not empty the pool).
func (p *Pool) resolve(life context.Context) {
	d := p.opts.DNS
	ctx, cancel := context.WithTimeout(life, max(p.probeTimeout(), 5*time.Second))
	defer cancel()
	addrs, err := d.Resolver.LookupHost(ctx, d.Name)
	if err != nil || len(addrs) == 0 {
		return
	}
	p.setMembers(dnsMembers(addrs, d.ControlPort, d.EventPort))
}

// dnsMembers makes members of addresses, sorted, without duplicates.
func dnsMembers(addrs []string, controlPort, eventPort int) []PoolMember {
	sort.Strings(addrs)
	var ms []PoolMember
	for i, a := range addrs {
		if i > 0 && a == addrs[i-1] {
			continue
		}
		ms = append(ms, PoolMember{
			Control: "tcp://" + net.JoinHostPort(a, strconv.Itoa(controlPort)),
			Event:   "tcp://" + net.JoinHostPort(a, strconv.Itoa(eventPort)),
		})
	}
	return ms
}

// setMembers makes want the members: new ones get Clients (and are down
// until their first health), those gone are closed (calls on them in
// progress fail with a *MemberError).
func (p *Pool) setMembers(want []PoolMember) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	keep := map[string]bool{}
	for _, pm := range want {
		keep[pm.Control] = true
		if _, ok := p.members[pm.Control]; !ok {
			p.members[pm.Control] = newMember(pm, p.opts.Client, p.probeTimeout())
		}
	}
	var gone []*member
	for k, m := range p.members {
		if !keep[k] {
			gone = append(gone, m)
			delete(p.members, k)
		}
	}
	// Tags: only those of one member (a collision of two members' tags is
	// looked up by asking, as an id without a tag is).
	count := map[string]int{}
	for _, m := range p.members {
		count[m.tag]++
	}
	p.tags = map[string]*member{}
	for _, m := range p.members {
		if count[m.tag] == 1 {
			p.tags[m.tag] = m
		}
	}
	p.mu.Unlock()
	for _, m := range gone {
		m.close()
	}
}

// String describes the member set, for errors.
func (pm PoolMember) String() string { return fmt.Sprintf("%s (events %s)", pm.Control, pm.Event) }
