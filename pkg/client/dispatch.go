package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/limits"
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
// Like the supervisor, it gives each job a cgroup of its own where this
// process may make them (cgroup v2, under its own cgroup or
// LocalOptions.CgroupParent: see Cgroups): a descendant that leaves its
// process group (setsid, daemonizing tools) is terminated with its job.
// Cgroup limits (memory.max, cpu.weight) need a CgroupParent with no
// processes of its own whose controllers this process may enable: under
// its own cgroup they are reported unavailable. Without cgroups it falls
// back to process groups (such a descendant escapes the kill;
// strictOwnership does nothing). SpawnArgs.Pace holds the job to the
// pace of its Job's readers, as Client.Start does. Rlimits and niceness (SpawnArgs.Limits
// noFile, addressSpace, nice) need LocalOptions.LimitsHelper (without it
// spawns asking for them fail). Unlike the supervisor it has no notify
// socket (notify spawns fail), and it reaps no orphans: in a gateway that
// is PID 1 or a subreaper, descendants orphaned by its jobs stay zombies
// unless the gateway reaps them.
type Local struct {
	m    *jobs.Manager
	sink *localSink
	// cg is the jobs' cgroup base (nil: process groups only); cgNote
	// says why there is none.
	cg     *cgroups.Base
	cgNote string
}

// LocalOptions configure NewLocalWith.
type LocalOptions struct {
	// MaxJobs bounds concurrent jobs (0: 50).
	MaxJobs int
	// NoCgroups keeps jobs in process groups only.
	NoCgroups bool
	// CgroupParent is the cgroup v2 directory (a path in the cgroup2
	// mount, or relative to it) under which job cgroups go; "" means this
	// process's own cgroup.
	CgroupParent string
	// LimitsHelper is the executable that applies a job's rlimits and
	// niceness before it execs the job's program: a program whose main
	// calls MaybeRunLimitsHelper first thing, usually this one (see
	// os.Executable). The job's program keeps the helper's pid, process
	// group and cgroup. "": spawns with such limits fail.
	LimitsHelper string
}

// MaybeRunLimitsHelper turns this process into the limits helper when it
// was started as one (by a Local with LocalOptions.LimitsHelper naming
// this program): it applies the job's limits and execs the job's program,
// never returning (exit status 127 if that fails, with the reason on
// stderr). Otherwise it returns at once. Call it first thing in main,
// before flags are parsed or goroutines started.
func MaybeRunLimitsHelper() { limits.MaybeRunHelper() }

// NewLocal returns a Local allowing maxJobs concurrent jobs (0: 50) with
// the supervisor's other defaults.
func NewLocal(maxJobs int) *Local { return NewLocalWith(LocalOptions{MaxJobs: maxJobs}) }

// localCgroupPrefix starts the name of a Local's cgroup base:
// "exec-supervisor-local-<pid namespace>-<pid>-<start ticks>-<n>", n
// random (each Local of a process has a base of its own). (Supervisors
// never touch these: theirs are named by state directory.)
const localCgroupPrefix = "exec-supervisor-local-"

// localBaseName is the cgroup base name of a Local of process pid (start
// ticks) in pid namespace ns.
func localBaseName(ns uint64, pid int, ticks, n uint64) string {
	return fmt.Sprintf("%s%d-%d-%d-%d", localCgroupPrefix, ns, pid, ticks, n)
}

// pidNamespace is the inode of this process's pid namespace: pids and
// start ticks mean something only within one.
func pidNamespace() (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, fmt.Errorf("pid namespace: %w", err)
	}
	return st.Ino, nil
}

// NewLocalWith returns a Local configured by o.
func NewLocalWith(o LocalOptions) *Local {
	cfg := jobs.DefaultConfig()
	if o.MaxJobs > 0 {
		cfg.MaxJobs = o.MaxJobs
	}
	s := &localSink{notify: map[string]chan struct{}{}}
	l := &Local{sink: s, cgNote: "disabled (LocalOptions.NoCgroups)"}
	var opts []jobs.Option
	if !o.NoCgroups {
		if base, err := localCgroups(o.CgroupParent); err != nil {
			l.cgNote = err.Error()
		} else {
			l.cg, l.cgNote = base, ""
			opts = append(opts, jobs.WithCgroups(base))
		}
	}
	if o.LimitsHelper != "" {
		opts = append(opts, jobs.WithLimitsHelper(o.LimitsHelper))
	}
	l.m = jobs.New(cfg, nil, s, opts...)
	return l
}

// localCgroups makes a Local's cgroup base under parent ("": this
// process's cgroup), after sweeping those of dead Locals beside it.
func localCgroups(parent string) (*cgroups.Base, error) {
	ns, err := pidNamespace()
	if err != nil {
		return nil, err
	}
	pid := os.Getpid()
	ticks, err := jobs.ProcStartTicks(pid)
	if err != nil {
		return nil, err
	}
	base, err := cgroups.Detect(parent, localBaseName(ns, pid, ticks, uint64(rand.Uint32())))
	if err != nil {
		return nil, err
	}
	sweepLocalCgroups(filepath.Dir(base.Dir), ns)
	return base, nil
}

// sweepLocalCgroups removes the cgroup bases in dir of Locals of pid
// namespace ns whose process is gone: their jobs were orphaned when it
// died, and nothing else would ever end them. A base of a live process,
// of another pid namespace (its pids are not ours to look up) or of an
// unexpected name is left alone.
func sweepLocalCgroups(dir string, ns uint64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, localCgroupPrefix) {
			continue
		}
		var bns, ticks, n uint64
		var pid int
		if _, err := fmt.Sscanf(name, localCgroupPrefix+"%d-%d-%d-%d", &bns, &pid, &ticks, &n); err != nil ||
			pid <= 0 || bns != ns || name != localBaseName(bns, pid, ticks, n) {
			continue
		}
		if t, err := jobs.ProcStartTicks(pid); err == nil && t == ticks {
			continue // its Local's process lives (ours among them)
		}
		dead := &cgroups.Base{Dir: filepath.Join(dir, name)}
		for _, c := range dead.Leftovers() {
			_ = c.Kill()
			_ = c.Remove(5 * time.Second)
		}
		_ = dead.Close()
	}
}

// Cgroups reports whether each job gets a cgroup of its own and, if not,
// why (as the supervisor's health says).
func (l *Local) Cgroups() (bool, string) { return l.cg != nil, l.cgNote }

// Close terminates the jobs still running and waits for them (bounded by
// ctx), then removes their cgroups.
func (l *Local) Close(ctx context.Context) error {
	err := l.m.Close(ctx)
	if l.cg != nil {
		// The last job cgroups are removed by their waiters a moment
		// after their jobs end: give them that moment (within ctx).
		deadline := time.Now().Add(2 * time.Second)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		for {
			cerr := l.cg.Close()
			if cerr == nil {
				break
			}
			if time.Now().After(deadline) {
				return errors.Join(err, cerr)
			}
			time.Sleep(20 * time.Millisecond) // waiting for job cgroups to be removed
		}
	}
	return err
}

// Start spawns a job in this process and follows it.
func (l *Local) Start(ctx context.Context, args protocol.SpawnArgs, bufferBytes int) (*Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // (as the supervisor's Start: nothing is started)
	}
	if !args.Pace {
		info, err := l.m.Spawn(args)
		if err != nil {
			return nil, err
		}
		return startJob(info.JobID, localBackend{l: l}, bufferBytes, false, nil), nil
	}
	// Paced (as Client.Start): the job's output is read no further than a
	// window past what the Job's follow has handed its readers.
	pacer := new(byte)
	_, info, err := l.m.SpawnJobWith(args, jobs.SpawnOptions{Pacer: pacer})
	if err != nil {
		return nil, err
	}
	return startJob(info.JobID, localBackend{l: l, pacer: pacer}, bufferBytes, true, nil), nil
}

// localBackend is a job of a Local; pacer, if set, is its pace's owner
// (a Job started with Pace).
type localBackend struct {
	l     *Local
	pacer *byte
}

func (b localBackend) ended(ctx context.Context, id string) error {
	j, err := b.l.m.Get(id)
	if err != nil {
		return err
	}
	select {
	case <-j.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b localBackend) follow(ctx context.Context, id string, fn FollowFunc) error {
	j, err := b.l.m.Get(id)
	if err != nil {
		return err
	}
	notify := b.l.sink.watch(id)
	defer b.l.sink.unwatch(id)
	if b.pacer != nil {
		defer j.Unpace(b.pacer)
	}
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
		if b.pacer != nil {
			_ = j.Pace(b.pacer, max(f.once.end, 0), nil) // (what fn was given: taken)
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
