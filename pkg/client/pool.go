package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// A Pool spreads jobs over several supervisors (one per host, say) and
// sends every op on a job to the supervisor that holds it.
//
// Members come from a static list (PoolOptions.Members) or from DNS
// (PoolOptions.DNS: the A/AAAA records of a name, or its SRV records, as a
// Kubernetes headless Service publishes them for each ready supervisor),
// looked up again every ResolveInterval; a failed lookup keeps the members. Each member is a *Client made from PoolOptions.Client
// (token, CURVE keys, timeouts), its endpoints replaced by the member's.
//
// Placement. A spawn with a session (SpawnArgs.SessionID) goes to the
// session's supervisor: of the members up, the one that ranks first for
// that session by rendezvous (highest random weight) hashing of the
// session and the member's control endpoint. Every process ranks alike,
// and a member joining or leaving moves only the sessions it takes or
// held (about 1/N): a session's jobs, and so its workspace, stay on one
// host. While that member is down, its sessions' new jobs go to their next
// member in rank, and back once it is up. A spawn without a session goes to
// the least loaded member up (health's activeJobs+queuedJobs over maxJobs,
// asked every HealthInterval and counted up by the spawns answered since).
//
// Ownership. Unless the caller chooses one (SpawnArgs.JobID), the Pool
// chooses the job's id: "p" + a tag of 8 hex digits (a hash of the
// member's control endpoint) + "-" + 16 random hex digits. The id says
// which member holds the job, in this process and in any other Pool over
// the same endpoints (a restarted gateway): no table is kept. An id
// without a tag of a current member (chosen by the caller, or the member's
// endpoint changed) and a name are looked up by asking every member up
// (status), and remembered.
//
// Names (SpawnArgs.Name) are per supervisor: the Pool does not make them
// unique across members. A session's named jobs are unique within it as
// they share a supervisor. An op given a name asks every member; if more
// than one knows the name it fails with an *AmbiguousJobError.
//
// Failure. A member whose health fails (refused, timed out, or any call's
// connection error) is down at once: new spawns go to the others, and
// calls on its jobs in progress or later (Wait, Follow, Poll, ...) fail
// with a *MemberError naming it (errors.Is ErrMemberDown) within
// HealthInterval plus the health timeout, never hanging. One that hangs
// (a stopped supervisor keeps its connections open) has its control
// connection closed when its health times out. Its health is asked on; once it answers
// it is up again, and its jobs answer as its journal recorded them (a job
// that ran through the crash ends as the supervisor's recovery decided).
//
// A Pool is safe for concurrent use. Close stops its goroutines and
// closes its members' Clients.
type Pool struct {
	opts  PoolOptions
	quit  chan struct{}
	done  chan struct{}
	ready chan struct{} // closed after the first member lookup and health round
	// life ends with Close: lookups and health requests in progress end.
	life    context.Context
	endLife context.CancelFunc

	mu      sync.Mutex
	members map[string]*member // by control endpoint
	tags    map[string]*member // by tag, tags of one member only
	known   map[string]string  // job id -> member key, for ids without a tag
	closed  bool
}

// PoolOptions configure a Pool. Exactly one of Members and DNS is given.
type PoolOptions struct {
	// Members is a static list of supervisors.
	Members []PoolMember
	// DNS finds the supervisors by name.
	DNS *PoolDNS
	// Client is the template of each member's Client: its ControlAddress
	// and EventAddress are replaced by the member's; the rest (Token,
	// CURVE keys, RequestTimeout, ...) is used as given.
	Client Options
	// HealthInterval is how often each member's health is asked; 0 means
	// 1 s. A health request gets half of RequestTimeout, at most 5 s.
	HealthInterval time.Duration
	// ResolveInterval is how often DNS is asked again; 0 means 30 s.
	ResolveInterval time.Duration
}

// PoolMember is one supervisor's endpoints.
type PoolMember struct {
	Control string // e.g. tcp://10.0.0.5:18790; the member's key in a Pool
	Event   string // e.g. tcp://10.0.0.5:18791
}

// PoolDNS finds members by DNS, in one of two ways:
//
//   - addresses (ControlPort and EventPort given): each address of Name
//     (A and AAAA records) becomes tcp://addr:ControlPort and
//     tcp://addr:EventPort;
//   - SRV records (ControlService and EventService given), as a Kubernetes
//     headless Service publishes them for its named ports:
//     _ControlService._tcp.Name and _EventService._tcp.Name, each record a
//     supervisor's host (target) and port. A target's address (its
//     lowest IPv4 one, else its lowest IPv6 one, looked up too) with the
//     control record's port and the event record's is a member; a target
//     with several records of each pairs them in port order; one in a
//     single list is left out. Priorities and weights are not used.
type PoolDNS struct {
	// Name is looked up, e.g. the headless Service
	// exec-supervisor.default.svc.cluster.local.
	Name string
	// ControlPort and EventPort are the members' ports (address lookups).
	ControlPort, EventPort int
	// ControlService and EventService are the services of the SRV
	// records (the Service's port names, e.g. "control" and "event"),
	// given instead of the ports.
	ControlService, EventService string
	// Resolver looks names up; nil means net.DefaultResolver.
	Resolver DNSResolver
}

// DNSResolver looks up hosts' addresses and SRV records (*net.Resolver is
// one).
type DNSResolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// ErrMemberDown is wrapped by a *MemberError of a supervisor that is not
// answering (dial refused, timed out, health failing, or gone from DNS).
var ErrMemberDown = errors.New("supervisor is down")

// ErrNoMembers is returned by a spawn when no member is up.
var ErrNoMembers = errors.New("no supervisor of the pool is up")

// MemberError is an error of one member: Member is its control endpoint.
// It wraps what the member (or the connection to it) said, and
// ErrMemberDown when it is not answering.
type MemberError struct {
	Member string
	// JobID is the job the call was about, if one; for a spawn that may
	// or may not have reached a member that went away, the id chosen for
	// it (ask Status once the member is up again).
	JobID string
	Err   error
}

func (e *MemberError) Error() string {
	if e.JobID != "" {
		return fmt.Sprintf("supervisor %s (job %s): %v", e.Member, e.JobID, e.Err)
	}
	return fmt.Sprintf("supervisor %s: %v", e.Member, e.Err)
}

func (e *MemberError) Unwrap() error { return e.Err }

// PartialError says some members could not answer an aggregating call
// (ListJobs, Health, a lookup of a job asked of every member): the
// results of the others are returned beside it.
type PartialError struct{ Errs []*MemberError }

func (e *PartialError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d supervisor(s) did not answer:", len(e.Errs))
	for _, me := range e.Errs {
		b.WriteString(" ")
		b.WriteString(me.Error())
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap returns the members' errors.
func (e *PartialError) Unwrap() []error {
	errs := make([]error, len(e.Errs))
	for i, me := range e.Errs {
		errs[i] = me
	}
	return errs
}

// AmbiguousJobError says more than one member knows a job id or name.
type AmbiguousJobError struct {
	JobID   string
	Members []string
}

func (e *AmbiguousJobError) Error() string {
	return fmt.Sprintf("job %q is known to %d supervisors (%s): names are per supervisor; use the job's id and its member's Client (Pool.Owner)",
		e.JobID, len(e.Members), strings.Join(e.Members, ", "))
}

// NewPool returns a Pool; its first member lookup and health round run in
// the background (a spawn waits for them, within its context).
func NewPool(opts PoolOptions) (*Pool, error) {
	if (len(opts.Members) == 0) == (opts.DNS == nil) {
		return nil, errors.New("pool: give either Members or DNS")
	}
	for _, m := range opts.Members {
		if m.Control == "" || m.Event == "" {
			return nil, fmt.Errorf("pool: member %+v: both Control and Event are required", m)
		}
	}
	if d := opts.DNS; d != nil {
		ports, srv := d.ControlPort > 0 && d.EventPort > 0, d.ControlService != "" && d.EventService != ""
		switch {
		case d.Name == "" || ports == srv:
			return nil, fmt.Errorf("pool: DNS needs Name, and ControlPort and EventPort or else ControlService and EventService (got %+v)", *d)
		case srv && (d.ControlPort != 0 || d.EventPort != 0):
			return nil, fmt.Errorf("pool: DNS with SRV services takes the ports from the records: no ControlPort or EventPort (got %+v)", *d)
		case ports && (d.ControlService != "" || d.EventService != ""):
			return nil, fmt.Errorf("pool: DNS with ports takes no SRV services (got %+v)", *d)
		case d.ControlPort > 65535 || d.EventPort > 65535:
			return nil, fmt.Errorf("pool: DNS ports out of range (got %+v)", *d)
		}
		if d.Resolver == nil {
			d2 := *d
			d2.Resolver = net.DefaultResolver
			opts.DNS = &d2
		}
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = time.Second
	}
	if opts.ResolveInterval <= 0 {
		opts.ResolveInterval = 30 * time.Second
	}
	opts.Client.fill() // (the timeouts the members get, for the health requests)
	p := &Pool{opts: opts, quit: make(chan struct{}), done: make(chan struct{}), ready: make(chan struct{}),
		members: map[string]*member{}, tags: map[string]*member{}, known: map[string]string{}}
	p.life, p.endLife = context.WithCancel(context.Background())
	if len(opts.Members) > 0 {
		p.setMembers(opts.Members)
	}
	go p.run()
	return p, nil
}

// Close stops the Pool's goroutines and closes its members' Clients:
// calls in progress fail (with ErrClosed). It is idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return nil
	}
	p.closed = true
	close(p.quit)
	p.endLife()
	p.mu.Unlock()
	<-p.done
	p.mu.Lock()
	ms := p.members
	p.members, p.tags = map[string]*member{}, map[string]*member{}
	p.mu.Unlock()
	for _, m := range ms {
		m.close()
	}
	return nil
}

// MemberState is what a Pool knows of one member.
type MemberState struct {
	Member string // control endpoint
	Event  string
	Up     bool
	// Err is why it is down (nil while up, or before its first health).
	Err error
	// ActiveJobs, QueuedJobs and MaxJobs are from its last health, plus
	// the spawns it answered since.
	ActiveJobs, QueuedJobs, MaxJobs int
	Draining                        bool
}

// Members returns the members' states, by control endpoint.
func (p *Pool) Members() []MemberState {
	ms := p.memberList()
	out := make([]MemberState, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.state())
	}
	return out
}

// Client returns the Client of the member whose control endpoint is key
// (nil if there is none now): for calls on a member known already (as
// PoolJob.Member says), which then have the Client's own timeouts and do
// not fail fast when it goes down. It is closed with the Pool.
func (p *Pool) Client(key string) *Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.members[key]; m != nil {
		return m.c
	}
	return nil
}

// memberList returns the current members, by key.
func (p *Pool) memberList() []*member {
	p.mu.Lock()
	defer p.mu.Unlock()
	ms := make([]*member, 0, len(p.members))
	for _, m := range p.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].key < ms[j].key })
	return ms
}

// waitReady waits for the first member lookup and health round.
func (p *Pool) waitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}
