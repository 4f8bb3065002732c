package client_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// dnsServer is a small authoritative DNS server on 127.0.0.1 (UDP): the
// records it is given, NXDOMAIN for other names, or SERVFAIL for every
// question while failing. Its goroutine ends with the test.
type dnsServer struct {
	conn net.PacketConn

	mu      sync.Mutex
	a       map[string][]string                 // name -> IPv4 addresses
	srv     map[string][]dnsmessage.SRVResource // "_svc._tcp.name." -> records
	failing bool
	asked   map[string]int // questions answered, by "name type"
	changed chan struct{}  // closed (and renewed) on every answer
}

func startDNS(t *testing.T) *dnsServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{conn: conn, a: map[string][]string{}, srv: map[string][]dnsmessage.SRVResource{},
		asked: map[string]int{}, changed: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return // (closed)
			}
			if reply, ok := d.answer(buf[:n]); ok {
				_, _ = conn.WriteTo(reply, from)
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return d
}

// resolver is a Go resolver that asks only d.
func (d *dnsServer) resolver() *net.Resolver {
	addr := d.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", addr)
	}}
}

// set replaces the records: A records by name, SRV records by their
// question name.
func (d *dnsServer) set(a map[string][]string, srv map[string][]dnsmessage.SRVResource) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.a, d.srv = a, srv
}

func (d *dnsServer) fail(on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failing = on
}

// answered returns how often "name type" was answered, and a channel
// closed at the next answer.
func (d *dnsServer) answered(q string) (int, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked[q], d.changed
}

// awaitAnswers waits until "name type" has been answered n more times.
func (d *dnsServer) awaitAnswers(t *testing.T, q string, n int) {
	t.Helper()
	from, _ := d.answered(q)
	deadline := time.After(30 * time.Second)
	for {
		got, next := d.answered(q)
		if got >= from+n {
			return
		}
		select {
		case <-next:
		case <-deadline:
			t.Fatalf("%q was answered %d times in 30 s, want %d", q, got-from, n)
		}
	}
}

func (d *dnsServer) answer(req []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	name := strings.ToLower(q.Name.String())
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	known := len(d.a[name]) > 0 || len(d.srv[name]) > 0
	switch {
	case d.failing:
		rh.RCode = dnsmessage.RCodeServerFailure
	case !known:
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(q)
	_ = b.StartAnswers()
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
	if !d.failing {
		switch q.Type {
		case dnsmessage.TypeA:
			for _, a := range d.a[name] {
				if ip := net.ParseIP(a).To4(); ip != nil {
					_ = b.AResource(rr, dnsmessage.AResource{A: [4]byte(ip)})
				}
			}
		case dnsmessage.TypeAAAA:
			for _, a := range d.a[name] {
				if ip := net.ParseIP(a); ip.To4() == nil {
					_ = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: [16]byte(ip.To16())})
				}
			}
		case dnsmessage.TypeSRV:
			for _, s := range d.srv[name] {
				_ = b.SRVResource(rr, s)
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, false
	}
	d.asked[name+" "+q.Type.String()]++
	close(d.changed)
	d.changed = make(chan struct{})
	return out, true
}

func srvRecord(target string, port int) dnsmessage.SRVResource {
	return dnsmessage.SRVResource{Priority: 10, Weight: 10, Port: uint16(port), Target: dnsmessage.MustNewName(target)}
}

// tcpSupervisor starts a supervisor on ip (tcp, admitted by uid on
// loopback) and returns it and its endpoints' ports.
func tcpSupervisor(t *testing.T, ip string) (s *supervisor, ctlPort, evtPort int) {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Skipf("cannot listen on %s (loopback addresses beyond 127.0.0.1 needed): %v", ip, err)
	}
	evt := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s = start(t, func(c *server.Config) {
		c.Control, c.Event = "tcp://"+ip+":0", "tcp://"+net.JoinHostPort(ip, strconv.Itoa(evt))
	})
	return s, s.Addr().(*net.TCPAddr).Port, s.EventAddr().(*net.TCPAddr).Port
}

// members returns the pool's members' control endpoints, and whether all
// are up.
func members(p *client.Pool) ([]string, bool) {
	var keys []string
	up := true
	for _, m := range p.Members() {
		keys = append(keys, m.Member)
		up = up && m.Up
	}
	return keys, up
}

// awaitMembers waits until the pool's members are want, all up.
func awaitMembers(t *testing.T, p *client.Pool, want ...string) {
	t.Helper()
	slices.Sort(want)
	for deadline := time.Now().Add(30 * time.Second); ; {
		got, up := members(p)
		if slices.Equal(got, want) && up {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %v (all up: %v), want %v", got, up, want)
		}
		time.Sleep(10 * time.Millisecond) // (polling the pool's view: it has no event to wait on)
	}
}

// TestPoolFindsMembersBySRV: a pool given SRV services finds its members
// as a Kubernetes headless Service publishes them (_control._tcp and
// _event._tcp of its name, a record per pod with its target and port, the
// target's address looked up too), follows the records as they change,
// and keeps its members through DNS failures (SERVFAIL, NXDOMAIN); a
// target in one list only is left out.
func TestPoolFindsMembersBySRV(t *testing.T) {
	_, aCtl, aEvt := tcpSupervisor(t, "127.0.0.2")
	_, bCtl, bEvt := tcpSupervisor(t, "127.0.0.3")
	ctlA, ctlB := "tcp://127.0.0.2:"+strconv.Itoa(aCtl), "tcp://127.0.0.3:"+strconv.Itoa(bCtl)
	dns := startDNS(t)
	addrs := map[string][]string{"a.sup.test.": {"127.0.0.2"}, "b.sup.test.": {"127.0.0.3"}, "c.sup.test.": {"127.0.0.4"}}
	dns.set(addrs, map[string][]dnsmessage.SRVResource{
		"_control._tcp.sup.test.": {srvRecord("a.sup.test.", aCtl), srvRecord("b.sup.test.", bCtl), srvRecord("c.sup.test.", 1)},
		"_event._tcp.sup.test.":   {srvRecord("b.sup.test.", bEvt), srvRecord("a.sup.test.", aEvt)}, // (c: no event port)
	})
	p, err := client.NewPool(client.PoolOptions{
		DNS:    &client.PoolDNS{Name: "sup.test.", ControlService: "control", EventService: "event", Resolver: dns.resolver()},
		Client: client.Options{RequestTimeout: 5 * time.Second}, HealthInterval: 50 * time.Millisecond, ResolveInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	awaitMembers(t, p, ctlA, ctlB)
	for _, m := range p.Members() {
		if want := map[string]string{ctlA: "tcp://127.0.0.2:" + strconv.Itoa(aEvt), ctlB: "tcp://127.0.0.3:" + strconv.Itoa(bEvt)}[m.Member]; m.Event != want {
			t.Fatalf("member %s: event endpoint %s, want %s", m.Member, m.Event, want)
		}
	}
	ctx := ctxT(t, 60*time.Second)
	j, err := p.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, fin, err := p.Wait(ctx, j.JobID, 10*time.Second); err != nil || !fin {
		t.Fatalf("wait for a job of a member found by SRV: %v", err)
	}

	// DNS failing: the members stay, and serve.
	dns.fail(true)
	dns.awaitAnswers(t, "_control._tcp.sup.test. TypeSRV", 2)
	awaitMembers(t, p, ctlA, ctlB)
	if _, err := p.Status(ctx, j.JobID); err != nil {
		t.Fatalf("status while DNS fails: %v", err)
	}
	dns.fail(false)

	// b leaves the Service: its records go, and so does it.
	dns.set(addrs, map[string][]dnsmessage.SRVResource{
		"_control._tcp.sup.test.": {srvRecord("a.sup.test.", aCtl)},
		"_event._tcp.sup.test.":   {srvRecord("a.sup.test.", aEvt)},
	})
	awaitMembers(t, p, ctlA)

	// The name gone (NXDOMAIN): kept.
	dns.set(addrs, nil)
	dns.awaitAnswers(t, "_control._tcp.sup.test. TypeSRV", 2)
	awaitMembers(t, p, ctlA)

	// A target whose address cannot be found: the lookup failed, the
	// members stay as they were.
	dns.set(map[string][]string{"a.sup.test.": {"127.0.0.2"}}, map[string][]dnsmessage.SRVResource{
		"_control._tcp.sup.test.": {srvRecord("a.sup.test.", aCtl), srvRecord("gone.sup.test.", bCtl)},
		"_event._tcp.sup.test.":   {srvRecord("a.sup.test.", aEvt), srvRecord("gone.sup.test.", bEvt)},
	})
	dns.awaitAnswers(t, "gone.sup.test. TypeA", 2)
	awaitMembers(t, p, ctlA)

	// b is back.
	dns.set(addrs, map[string][]dnsmessage.SRVResource{
		"_control._tcp.sup.test.": {srvRecord("b.sup.test.", bCtl), srvRecord("a.sup.test.", aCtl)},
		"_event._tcp.sup.test.":   {srvRecord("a.sup.test.", aEvt), srvRecord("b.sup.test.", bEvt)},
	})
	awaitMembers(t, p, ctlA, ctlB)
	if got, err := p.Status(ctx, j.JobID); err != nil || got.Member != j.Member {
		t.Fatalf("status after the members changed: %+v %v", got, err)
	}
}

// TestPoolFindsMembersByAddress: DNS with ports (A records): each address
// a member at the ports given; a failure keeps them.
func TestPoolFindsMembersByAddress(t *testing.T) {
	dns := startDNS(t)
	dns.set(map[string][]string{"hosts.test.": {"127.0.0.3", "127.0.0.2"}}, nil)
	p, err := client.NewPool(client.PoolOptions{
		DNS:    &client.PoolDNS{Name: "hosts.test.", ControlPort: 18790, EventPort: 18791, Resolver: dns.resolver()},
		Client: client.Options{RequestTimeout: time.Second}, HealthInterval: 50 * time.Millisecond, ResolveInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := []string{"tcp://127.0.0.2:18790", "tcp://127.0.0.3:18790"}
	awaitKeys := func() {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; {
			if got, _ := members(p); slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				got, _ := members(p)
				t.Fatalf("members %v, want %v", got, want)
			}
			time.Sleep(10 * time.Millisecond) // (polling the pool's view)
		}
	}
	awaitKeys()
	dns.fail(true)
	dns.awaitAnswers(t, "hosts.test. TypeA", 2)
	awaitKeys()
	dns.fail(false)
	dns.set(map[string][]string{"hosts.test.": {"127.0.0.2"}}, nil)
	want = want[:1]
	awaitKeys()

	// A dual-stack name (A and AAAA records of the same hosts): one
	// member per host, not two; a name with only AAAA records: those.
	dns.set(map[string][]string{"hosts.test.": {"::1", "127.0.0.3", "fd00::2", "127.0.0.2"}}, nil)
	want = []string{"tcp://127.0.0.2:18790", "tcp://127.0.0.3:18790"}
	awaitKeys()
	dns.set(map[string][]string{"hosts.test.": {"fd00::2", "::1"}}, nil)
	want = []string{"tcp://[::1]:18790", "tcp://[fd00::2]:18790"}
	awaitKeys()
}

// TestPoolDNSOptions: DNS options that cannot be used are refused.
func TestPoolDNSOptions(t *testing.T) {
	for _, d := range []client.PoolDNS{
		{Name: "x"},
		{Name: "x", ControlPort: 1},
		{Name: "x", ControlService: "control"},
		{Name: "x", ControlPort: 1, EventPort: 2, ControlService: "control"},
		{Name: "x", ControlService: "control", EventService: "event", EventPort: 2},
		{Name: "x", ControlPort: 1, EventPort: 70000},
		{ControlService: "control", EventService: "event"},
	} {
		if p, err := client.NewPool(client.PoolOptions{DNS: &d}); err == nil {
			p.Close()
			t.Errorf("%+v accepted", d)
		} else if !strings.Contains(err.Error(), "DNS") {
			t.Errorf("%+v: %v", d, err)
		}
	}
}
