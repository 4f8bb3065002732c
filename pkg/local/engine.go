// Package local runs jobs in the calling process with the supervisor's
// own job engine (internal/jobs): each job in a process group of its own
// (and a cgroup where it can make one), killed through the same path,
// with the same timeouts, ring buffer, events and termination reasons.
// Its jobs are pkg/client Jobs, so a gateway can hand an Engine to
// client.NewDispatcher as the origin of its origin mode and read a job the
// same way wherever it runs.
//
// It is a separate package so that pkg/client stays a client: importing
// this one links the engine (cgroups, PTYs, rlimits), a program that
// only talks to a supervisor does not.
//
// It deliberately is not a supervisor: no sockets and no wire protocol
// (a job is reached through its *client.Job only: no status, poll or
// list by id), no journal (jobs do not outlive the Engine; those of a
// process that died are ended by the next Engine beside it, see Engine),
// no notify sockets, no orphan reaping and no metrics.
package local

import (
	"context"
	"errors"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/limits"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Engine runs jobs in this process with the supervisor's job engine: own
// process group per job, the same kill path, timeouts, ring buffer, events
// and termination reasons. Close it to terminate its jobs. It is a
// client.Origin.
//
// Like the supervisor, it gives each job a cgroup of its own where this
// process may make them (cgroup v2, under its own cgroup or
// Options.CgroupParent: see Cgroups): a descendant that leaves its
// process group (setsid, daemonizing tools) is terminated with its job.
// Cgroup limits (memory.max, cpu.weight) need a CgroupParent with no
// processes of its own whose controllers this process may enable: under
// its own cgroup they are reported unavailable. Without cgroups it falls
// back to process groups (such a descendant escapes the kill;
// strictOwnership does nothing). The jobs of an Engine whose process died
// run on; with cgroups, the next Engine made beside it (same parent
// cgroup, same pid namespace) ends them. SpawnArgs.Pace holds the job to the
// pace of its Job's readers, as client.Client.Start does. Rlimits and
// niceness (SpawnArgs.Limits noFile, addressSpace, nice) need
// Options.LimitsHelper (without it spawns asking for them fail). Unlike
// the supervisor it has no notify socket (notify spawns fail), and it
// reaps no orphans: in a gateway that is PID 1 or a subreaper,
// descendants orphaned by its jobs stay zombies unless the gateway reaps
// them.
type Engine struct {
	m    *jobs.Manager
	sink *sink
	// cg is the jobs' cgroup base (nil: process groups only); cgNote
	// says why there is none.
	cg     *cgroups.Base
	cgNote string
}

var _ client.Origin = (*Engine)(nil)

// Options configure NewWith. The zero value is New(0)'s configuration.
type Options struct {
	// MaxJobs bounds concurrent jobs (0: 50).
	MaxJobs int
	// NoCgroups keeps jobs in process groups only (false: a cgroup per
	// job where this process may make them).
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
// was started as one (by an Engine with Options.LimitsHelper naming this
// program): it applies the job's limits and execs the job's program,
// never returning (exit status 127 if that fails, with the reason on
// stderr). Otherwise it returns at once. Call it first thing in main,
// before flags are parsed or goroutines started.
func MaybeRunLimitsHelper() { limits.MaybeRunHelper() }

// New returns an Engine allowing maxJobs concurrent jobs (0: 50) with the
// supervisor's other defaults.
func New(maxJobs int) *Engine { return NewWith(Options{MaxJobs: maxJobs}) }

// NewWith returns an Engine configured by o.
func NewWith(o Options) *Engine {
	cfg := jobs.DefaultConfig()
	if o.MaxJobs > 0 {
		cfg.MaxJobs = o.MaxJobs
	}
	s := &sink{notify: map[string]chan struct{}{}}
	e := &Engine{sink: s, cgNote: "disabled (Options.NoCgroups)"}
	var opts []jobs.Option
	if !o.NoCgroups {
		if base, err := newCgroupBase(o.CgroupParent); err != nil {
			e.cgNote = err.Error()
		} else {
			e.cg, e.cgNote = base, ""
			opts = append(opts, jobs.WithCgroups(base))
		}
	}
	if o.LimitsHelper != "" {
		opts = append(opts, jobs.WithLimitsHelper(o.LimitsHelper))
	}
	e.m = jobs.New(cfg, nil, s, opts...)
	return e
}

// Cgroups reports whether each job gets a cgroup of its own and, if not,
// why (as the supervisor's health says).
func (e *Engine) Cgroups() (bool, string) { return e.cg != nil, e.cgNote }

// Close terminates the jobs still running and waits for them (bounded by
// ctx), then removes their cgroups.
func (e *Engine) Close(ctx context.Context) error {
	err := e.m.Close(ctx)
	if e.cg != nil {
		// The last job cgroups are removed by their waiters a moment
		// after their jobs end: give them that moment (within ctx).
		deadline := time.Now().Add(2 * time.Second)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		for {
			cerr := e.cg.Close()
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

// Start spawns a job in this process and follows it. bufferBytes bounds
// the unread output its Job holds per stream, as for client.Client.Start.
func (e *Engine) Start(ctx context.Context, args protocol.SpawnArgs, bufferBytes int) (*client.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // (as the supervisor's Start: nothing is started)
	}
	if !args.Pace {
		info, err := e.m.Spawn(args)
		if err != nil {
			return nil, engineErr(err)
		}
		return client.NewJob(info.JobID, &backend{e: e, id: info.JobID}, bufferBytes, false), nil
	}
	// Paced (as Client.Start): the job's output is read no further than a
	// window past what the Job's follow has handed its readers.
	pacer := new(byte)
	_, info, err := e.m.SpawnJobWith(args, jobs.SpawnOptions{Pacer: pacer})
	if err != nil {
		return nil, engineErr(err)
	}
	return client.NewJob(info.JobID, &backend{e: e, id: info.JobID, pacer: pacer}, bufferBytes, true), nil
}
