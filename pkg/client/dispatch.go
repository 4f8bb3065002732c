package client

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Mode says where a Dispatcher runs new jobs.
type Mode string

// Dispatcher modes.
const (
	// ModeOrigin runs jobs in this process (children of the caller), with
	// the same job semantics as the supervisor.
	ModeOrigin Mode = "origin"
	// ModeZMQ runs jobs through the supervisor.
	ModeZMQ Mode = "zmq"
)

// Dispatcher runs commands in-process or through the supervisor and can
// switch between the two at run time. Switching affects only new jobs:
// a Job keeps the mode it started in. Safe for concurrent use.
type Dispatcher struct {
	c     *Client
	local *Local

	mu   sync.Mutex
	mode Mode
	// gen counts SetMode calls: one that finishes after a later call
	// began (its health check was slow) does not override it.
	gen uint64
}

// NewDispatcher returns a Dispatcher in ModeOrigin. c may be nil when only
// origin mode is used; local must not be nil.
func NewDispatcher(c *Client, local *Local) *Dispatcher {
	return &Dispatcher{c: c, local: local, mode: ModeOrigin}
}

// Mode returns the current mode.
func (d *Dispatcher) Mode() Mode {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mode
}

// SetMode switches the mode for new jobs. Switching to ModeZMQ requires a
// healthy supervisor (a health check is made); switching to ModeOrigin
// needs nothing. Of calls that overlap, the last one begun wins: an earlier
// one that finishes later (its health check was slow) changes nothing and
// returns an error.
func (d *Dispatcher) SetMode(ctx context.Context, m Mode) error {
	switch {
	case m != ModeOrigin && m != ModeZMQ:
		return fmt.Errorf("unknown mode %q (want %s or %s)", m, ModeOrigin, ModeZMQ)
	case m == ModeZMQ && d.c == nil:
		return fmt.Errorf("switch to %s: no supervisor client configured", m)
	}
	d.mu.Lock()
	d.gen++
	gen := d.gen
	d.mu.Unlock()
	switch m {
	case ModeOrigin:
	case ModeZMQ:
		if d.c == nil {
			return fmt.Errorf("switch to %s: no supervisor client configured", m)
		}
		h, err := d.c.Health(ctx)
		if err != nil {
			return fmt.Errorf("switch to %s: supervisor not healthy: %w", m, err)
		}
		if !h.OK {
			return fmt.Errorf("switch to %s: supervisor is shutting down", m)
		}
	default:
		return fmt.Errorf("unknown mode %q (want %s or %s)", m, ModeOrigin, ModeZMQ)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen != gen {
		return fmt.Errorf("switch to %s: overtaken by a later SetMode (mode is %s)", m, d.mode)
	}
	d.mode = m
	return nil
}

// Start runs a job in the current mode.
func (d *Dispatcher) Start(ctx context.Context, args protocol.SpawnArgs, bufferBytes int) (*Job, error) {
	if d.Mode() == ModeZMQ {
		return d.c.Start(ctx, args, bufferBytes)
	}
	return d.local.Start(ctx, args, bufferBytes)
}

// Local runs jobs in this process with the supervisor's job engine: own
// process group per job, the same kill path, timeouts, ring buffer, events
// and termination reasons. Close it to terminate its jobs.
//
// Unlike the supervisor it has no cgroup per job (a descendant that leaves
// its process group, e.g. with setsid, escapes the kill; strictOwnership
// and cgroup limits do nothing), no notify socket and no rlimits helper
// (spawns asking for them fail), and it reaps no orphans: in a gateway that
// is PID 1 or a subreaper, descendants orphaned by its jobs stay zombies
// unless the gateway reaps them.
type Local struct {
	m    *jobs.Manager
	sink *localSink
}

// NewLocal returns a Local allowing maxJobs concurrent jobs (0: 50) with
// the supervisor's other defaults.
func NewLocal(maxJobs int) *Local {
	cfg := jobs.DefaultConfig()
	if maxJobs > 0 {
		cfg.MaxJobs = maxJobs
	}
	s := &localSink{notify: map[string]chan struct{}{}}
	return &Local{m: jobs.New(cfg, nil, s), sink: s}
}

// Close terminates the jobs still running and waits for them (bounded by ctx).
func (l *Local) Close(ctx context.Context) error { return l.m.Close(ctx) }

// Start spawns a job in this process and follows it.
func (l *Local) Start(ctx context.Context, args protocol.SpawnArgs, bufferBytes int) (*Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // (as the supervisor's Start: nothing is started)
	}
	info, err := l.m.Spawn(args)
	if err != nil {
		return nil, err
	}
	return startJob(info.JobID, localBackend{l}, bufferBytes), nil
}

type localBackend struct{ l *Local }

func (b localBackend) follow(ctx context.Context, id string, fn FollowFunc) error {
	j, err := b.l.m.Get(id)
	if err != nil {
		return err
	}
	notify := b.l.sink.watch(id)
	defer b.l.sink.unwatch(id)
	f := follower{jobID: id, next: 1, fn: fn}
	for {
		res, err := j.Events(f.next, 0)
		if err != nil {
			return err
		}
		stop, err := f.apply(res.Missing, res.Events, 0, func(_ protocol.Event, done bool) bool { return done })
		if stop || err != nil {
			return err
		}
		if res.More {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-notify:
		}
	}
}

func (b localBackend) kill(ctx context.Context, id, sig string) error {
	j, err := b.l.m.Get(id)
	if err != nil {
		return err
	}
	s := syscall.SIGTERM
	if sig != "" {
		if s, err = protocol.ParseSignal(sig); err != nil {
			return err
		}
	}
	if s != syscall.SIGTERM && s != syscall.SIGKILL {
		return j.Signal(s)
	}
	_, err = j.Kill(protocol.ReasonManualCancel, s)
	return err
}

func (b localBackend) write(ctx context.Context, id string, data []byte, eof bool) error {
	j, err := b.l.m.Get(id)
	if err != nil {
		return err
	}
	_, err = j.Write(data, eof)
	return err
}

// localSink wakes the followers of a job when it has a new event.
type localSink struct {
	mu     sync.Mutex
	notify map[string]chan struct{}
}

func (s *localSink) Publish(ev protocol.Event) {
	s.mu.Lock()
	ch := s.notify[ev.JobID]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (s *localSink) watch(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.notify[id]
	if ch == nil {
		ch = make(chan struct{}, 1)
		s.notify[id] = ch
	}
	return ch
}

func (s *localSink) unwatch(id string) {
	s.mu.Lock()
	delete(s.notify, id)
	s.mu.Unlock()
}
