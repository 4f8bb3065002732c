package jobs

import (
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Config holds the Manager's limits and timings. Zero values are replaced
// by the defaults of DefaultConfig.
type Config struct {
	// MaxJobs bounds jobs not yet exited (queued ones aside).
	MaxJobs int
	// MaxQueued bounds the jobs spawned with Queue waiting for a slot
	// under MaxJobs; past it such a spawn is refused as too-many-jobs.
	MaxQueued int
	// RingBytes bounds retained output per job.
	RingBytes int
	// MergeInterval batches output into events: output read when its
	// stream made no event for a whole interval becomes one at once,
	// what follows within the interval waits for its end (see
	// mergeLocked). 0 sends each read at once.
	MergeInterval time.Duration
	// MergeMaxBytes flushes a stream's pending output at this size.
	MergeMaxBytes int
	// DefaultTimeout is the overall timeout of jobs that do not set one.
	DefaultTimeout time.Duration
	// Grace is the default SIGTERM-to-SIGKILL delay.
	Grace time.Duration
	// Retention keeps finished jobs this long before the sweep forgets them.
	Retention time.Duration
	// CleanupInterval is the period of the retention sweep.
	CleanupInterval time.Duration
	// MaxFinished and MaxFinishedOutput bound the finished one-shot jobs
	// retention keeps: their number (each costs ~1.5 KB of fixed-size
	// structures), and the bytes they hold: their output and what they
	// keep of their spec (argv, shell, cwd, labels, error: see
	// Job.finishedCostLocked; env is dropped when a job finishes). Past
	// either, the oldest are forgotten before their retention period ends
	// (counted in Forgotten). Memory stays bounded however fast jobs end:
	// about MaxFinished x 1.5 KB + MaxFinishedOutput.
	MaxFinished       int
	MaxFinishedOutput int64
	// MaxFinishedServices bounds the services whose supervision ended
	// (restart-limit, stopped, killed, a clean exit under on-failure, a
	// spawn error) that are kept: retention does not forget them (they
	// may be started again), and past this many the ones that finished
	// longest ago are forgotten (counted in Forgotten). Each holds up to
	// its ring buffer and run history.
	MaxFinishedServices int
	// DrainTimeout bounds the wait for output pipes to close once the
	// job's process group is gone (a process that escaped the group may
	// hold them open).
	DrainTimeout time.Duration
	// PaceStallLimit is how long a pacer (see Job.Pace) may hold a job
	// while it takes nothing: then it loses its pace and the job runs on
	// (what it prints meanwhile may leave the ring before that pacer
	// reads it: it sees a gap). A later Pace of its paces again. <= 0:
	// never (a pacer holds a job as a stopped reader holds a pipe's
	// writer).
	PaceStallLimit time.Duration
	// OutputDisk says which jobs keep their output on disk when their
	// spawn does not say (see WithOutputLog): OutputDiskServices (""
	// too), OutputDiskAll or OutputDiskNone.
	OutputDisk string
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxJobs:         50,
		MaxQueued:       1000,
		RingBytes:       2 << 20,
		MergeInterval:   200 * time.Millisecond,
		MergeMaxBytes:   64 << 10,
		DefaultTimeout:  10 * time.Minute,
		Grace:           5 * time.Second,
		Retention:       5 * time.Minute,
		CleanupInterval: time.Minute,
		DrainTimeout:    2 * time.Second,
		PaceStallLimit:  2 * time.Minute,
		// 100000 finished jobs with no output take ~150 MB.
		MaxFinished:         100000,
		MaxFinishedOutput:   1 << 30,
		MaxFinishedServices: 500,
		OutputDisk:          OutputDiskServices,
	}
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.MaxJobs <= 0 {
		c.MaxJobs = d.MaxJobs
	}
	if c.RingBytes <= 0 {
		c.RingBytes = d.RingBytes
	}
	if c.MergeMaxBytes <= 0 {
		c.MergeMaxBytes = d.MergeMaxBytes
	}
	if c.MergeMaxBytes > c.RingBytes {
		c.MergeMaxBytes = c.RingBytes
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = d.DefaultTimeout
	}
	if c.Grace <= 0 {
		c.Grace = d.Grace
	}
	if c.Retention <= 0 {
		c.Retention = d.Retention
	}
	if c.CleanupInterval <= 0 {
		c.CleanupInterval = d.CleanupInterval
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	if c.MaxFinished <= 0 {
		c.MaxFinished = d.MaxFinished
	}
	if c.MaxQueued <= 0 {
		c.MaxQueued = d.MaxQueued
	}
	if c.MaxFinishedServices <= 0 {
		c.MaxFinishedServices = d.MaxFinishedServices
	}
	if c.MaxFinishedOutput <= 0 {
		c.MaxFinishedOutput = d.MaxFinishedOutput
	}
}

// Sink receives every job event in per-job seq order. Publish must not
// block: it is called with the job's lock held.
type Sink interface {
	Publish(ev protocol.Event)
}

// Hooks observe lifecycle steps (for metrics). Nil fields are skipped.
// They must be cheap, and are called without locks held unless their
// field says otherwise.
type Hooks struct {
	Spawned func()
	// Started is called once a run's process exists, before the start is
	// returned to its caller (so before a spawn is answered), with no
	// lock held; it may call back into the job (Snapshot) and the
	// Manager (Journaled). The server writes the job's intent record
	// there (see journal.Intents).
	Started func(j *Job)
	// Finished is called when a job is over (a service: when its
	// supervision ends; its runs are RunEnded's).
	Finished    func(reason protocol.Reason, service bool)
	OutputBytes func(stream protocol.Stream, n int)
	// CleanupKill is called when a run needed SIGKILL after its grace
	// period (mode: the job's ownership, pgid or cgroup), with the job's
	// lock held so that it is counted before the job can be seen
	// finished: it must not block or call back into the Manager.
	CleanupKill func(mode string)
	// OwnershipEscape is called when a job's processes left its process
	// group (or session) but were still found in its cgroup.
	OwnershipEscape func()
	// RunEnded is called when a run of a service ends (how: reason),
	// whether another follows or not; Restarted when another is
	// scheduled. Both are called with the job's lock held: they must not
	// block or call back into the Manager.
	RunEnded  func(reason protocol.Reason)
	Restarted func()
	// Changed is called after every state change of any job (and after a
	// job is forgotten). It may be called with a job's lock held: it must
	// not block or call back into the Manager (signal a channel).
	Changed func()
	// BeforeServiceRun is called with the job's id before a service's
	// second or later run is started (a restart, a start by hand, a
	// resume after a supervisor restart), with no lock held, and may call
	// back into the Manager: the server writes the journal there when its
	// record on disk is a finished one, so that a supervisor that dies
	// while the run publishes finds the service recorded as running and
	// numbers its events and output past all it may have published (see
	// seqReserve, offsetReserve), rather than a finished record from
	// which the same seqs and offsets would be used again.
	BeforeServiceRun func(jobID string)
	// OutputHeld is called with true when a job's output is held because
	// the journal has not been written for too long (see
	// Job.gatedLocked), and with false when it is read again. Called
	// with the job's lock held: it must not block.
	OutputHeld func(held bool)
	// PaceStalled is called when a pacer loses its pace for having held
	// a job longer than PaceStallLimit while taking nothing.
	PaceStalled func()
}
