package client

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
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

// resolve looks the DNS name up and makes what it finds the members. A
// failed or empty lookup keeps the members as they are (a DNS hiccup does
// not empty the pool).
func (p *Pool) resolve(life context.Context) {
	d := p.opts.DNS
	ctx, cancel := context.WithTimeout(life, max(p.probeTimeout(), 5*time.Second))
	defer cancel()
	var ms []PoolMember
	if d.ControlService != "" {
		var err error
		if ms, err = srvMembers(ctx, d); err != nil {
			return
		}
	} else {
		addrs, err := d.Resolver.LookupHost(ctx, d.Name)
		if err != nil {
			return
		}
		ms = dnsMembers(addrs, d.ControlPort, d.EventPort)
	}
	if len(ms) == 0 {
		return
	}
	p.setMembers(ms)
}

// dnsMembers makes members of addresses (of one family: see oneFamily),
// sorted, without duplicates.
func dnsMembers(addrs []string, controlPort, eventPort int) []PoolMember {
	ips := oneFamily(addrs)
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	ips = slices.Compact(ips)
	var ms []PoolMember
	for _, ip := range ips {
		a := ip.String()
		ms = append(ms, PoolMember{
			Control: "tcp://" + net.JoinHostPort(a, strconv.Itoa(controlPort)),
			Event:   "tcp://" + net.JoinHostPort(a, strconv.Itoa(eventPort)),
		})
	}
	return ms
}

// maxSRVTargets bounds the targets one SRV lookup makes members of.
const maxSRVTargets = 1024

// srvMembers looks up d's SRV records, and their targets' addresses: the
// members, sorted. Any lookup failing fails it (the members stay).
func srvMembers(ctx context.Context, d *PoolDNS) ([]PoolMember, error) {
	ctl, err := srvPorts(ctx, d.Resolver, d.ControlService, d.Name)
	if err != nil {
		return nil, err
	}
	evt, err := srvPorts(ctx, d.Resolver, d.EventService, d.Name)
	if err != nil {
		return nil, err
	}
	targets := make([]string, 0, len(ctl))
	for t := range ctl {
		if len(evt[t]) > 0 {
			targets = append(targets, t)
		}
	}
	sort.Strings(targets)
	if len(targets) > maxSRVTargets {
		targets = targets[:maxSRVTargets]
	}
	var ms []PoolMember
	for _, t := range targets {
		addr, err := hostAddr(ctx, d.Resolver, t)
		if err != nil {
			return nil, err
		}
		cp, ep := ctl[t], evt[t]
		for i := range min(len(cp), len(ep)) {
			ms = append(ms, PoolMember{
				Control: "tcp://" + net.JoinHostPort(addr, strconv.Itoa(int(cp[i]))),
				Event:   "tcp://" + net.JoinHostPort(addr, strconv.Itoa(int(ep[i]))),
			})
		}
	}
	return dedupMembers(ms), nil
}

// srvPorts looks up the SRV records of service on name over tcp: each
// target's ports, lowest first, without duplicates. Records with an
// invalid target are left out by the resolver, which says so with an
// error beside the others: those others are used.
func srvPorts(ctx context.Context, r DNSResolver, service, name string) (map[string][]uint16, error) {
	_, recs, err := r.LookupSRV(ctx, service, "tcp", name)
	if err != nil && len(recs) == 0 {
		return nil, fmt.Errorf("SRV _%s._tcp.%s: %w", service, name, err)
	}
	ports := map[string][]uint16{}
	for _, rec := range recs {
		if rec == nil || rec.Port == 0 || rec.Target == "" || rec.Target == "." {
			continue // ("." says there is no such service)
		}
		t := strings.ToLower(strings.TrimSuffix(rec.Target, "."))
		if !slices.Contains(ports[t], rec.Port) {
			ports[t] = append(ports[t], rec.Port)
		}
	}
	for _, ps := range ports {
		slices.Sort(ps)
	}
	return ports, nil
}

// hostAddr returns target's address: its lowest IPv4 address, else its
// lowest IPv6 one (one member per supervisor, the same in every process).
func hostAddr(ctx context.Context, r DNSResolver, target string) (string, error) {
	addrs, err := r.LookupHost(ctx, target)
	if err != nil {
		return "", fmt.Errorf("SRV target %s: %w", target, err)
	}
	l := oneFamily(addrs)
	if len(l) == 0 {
		return "", fmt.Errorf("SRV target %s: no address", target)
	}
	return slices.MinFunc(l, func(a, b netip.Addr) int { return a.Compare(b) }).String(), nil
}

// oneFamily is the IPv4 addresses of addrs if there are any, else its
// IPv6 ones: a dual-stack name (A and AAAA records) names each host once
// in each family, and one supervisor must not become two members.
func oneFamily(addrs []string) []netip.Addr {
	var v4, v6 []netip.Addr
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		switch {
		case err != nil:
		case ip.Unmap().Is4():
			v4 = append(v4, ip.Unmap())
		default:
			v6 = append(v6, ip)
		}
	}
	if len(v4) > 0 {
		return v4
	}
	return v6
}

// dedupMembers sorts ms by control endpoint and leaves out a member whose
// control or event endpoint an earlier one has (two targets of one
// address).
func dedupMembers(ms []PoolMember) []PoolMember {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Control < ms[j].Control })
	seen := map[string]bool{}
	out := ms[:0]
	for _, m := range ms {
		if seen[m.Control] || seen[m.Event] {
			continue
		}
		seen[m.Control], seen[m.Event] = true, true
		out = append(out, m)
	}
	return out
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
