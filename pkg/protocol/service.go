package protocol

import (
	"math"
	"strings"
)

// Restart policies of RestartPolicy.Policy.
const (
	// RestartNever: the job runs once (the default).
	RestartNever = "never"
	// RestartOnFailure: the job is restarted when a run fails (non-zero
	// exit, a signal, a timeout, the watchdog); a clean exit (code 0)
	// ends supervision.
	RestartOnFailure = "on-failure"
	// RestartAlways: the job is restarted whenever a run ends, whatever
	// the exit status, until it is stopped or killed.
	RestartAlways = "always"
)

// Defaults of RestartPolicy fields left zero (as in the app-supervision
// and daemon-supervisor designs).
const (
	DefaultRestartDelayMs    = 1000
	DefaultBackoffMultiplier = 2.0
	DefaultMaxDelayMs        = 5 * 60 * 1000
	DefaultResetAfterMs      = 5 * 60 * 1000
	DefaultMaxRestarts       = 5
	DefaultRestartWindowMs   = 5 * 60 * 1000
)

// RestartPolicy makes a job a supervised service: when a run ends, the
// supervisor starts it again (same job id, next attempt) after a delay
// that grows by BackoffMultiplier per consecutive failure, up to
// MaxDelayMs. A run longer than ResetAfterMs resets the delay. When
// MaxRestarts runs have ended within RestartWindowMs, supervision ends
// with reason restart-limit (0 = no limit). Zero fields take the defaults.
type RestartPolicy struct {
	// Policy is "never" (default), "on-failure" or "always".
	Policy            string  `msgpack:"policy" json:"policy"`
	RestartDelayMs    int64   `msgpack:"restartDelayMs,omitempty" json:"restartDelayMs,omitempty"`
	BackoffMultiplier float64 `msgpack:"backoffMultiplier,omitempty" json:"backoffMultiplier,omitempty"`
	MaxDelayMs        int64   `msgpack:"maxDelayMs,omitempty" json:"maxDelayMs,omitempty"`
	ResetAfterMs      int64   `msgpack:"resetAfterMs,omitempty" json:"resetAfterMs,omitempty"`
	// MaxRestarts: absent = 5; 0 = keep restarting forever.
	MaxRestarts     *int  `msgpack:"maxRestarts,omitempty" json:"maxRestarts,omitempty"`
	RestartWindowMs int64 `msgpack:"restartWindowMs,omitempty" json:"restartWindowMs,omitempty"`
}

// Enabled reports whether p makes the job a service (policy other than never).
func (p *RestartPolicy) Enabled() bool {
	return p != nil && p.Policy != "" && p.Policy != RestartNever
}

// WithDefaults returns p with zero fields replaced by the defaults.
func (p RestartPolicy) WithDefaults() RestartPolicy {
	if p.Policy == "" {
		p.Policy = RestartNever
	}
	if p.RestartDelayMs == 0 {
		p.RestartDelayMs = DefaultRestartDelayMs
	}
	if p.BackoffMultiplier == 0 {
		p.BackoffMultiplier = DefaultBackoffMultiplier
	}
	if p.MaxDelayMs == 0 {
		p.MaxDelayMs = DefaultMaxDelayMs
	}
	if p.MaxDelayMs < p.RestartDelayMs {
		p.MaxDelayMs = p.RestartDelayMs
	}
	if p.ResetAfterMs == 0 {
		p.ResetAfterMs = DefaultResetAfterMs
	}
	if p.MaxRestarts == nil {
		n := DefaultMaxRestarts
		p.MaxRestarts = &n
	}
	if p.RestartWindowMs == 0 {
		p.RestartWindowMs = DefaultRestartWindowMs
	}
	return p
}

func (p *RestartPolicy) validate() error {
	switch p.Policy {
	case "", RestartNever, RestartOnFailure, RestartAlways:
	default:
		return Errorf(CodeInvalidArgument, "restart.policy %.32q is not %q, %q or %q", p.Policy, RestartNever, RestartOnFailure, RestartAlways)
	}
	for name, v := range map[string]int64{"restartDelayMs": p.RestartDelayMs, "maxDelayMs": p.MaxDelayMs, "resetAfterMs": p.ResetAfterMs, "restartWindowMs": p.RestartWindowMs} {
		if v < 0 || v > MaxTimeoutMs {
			return Errorf(CodeInvalidArgument, "restart.%s is %d; it must be 0..%d (7 days)", name, v, int64(MaxTimeoutMs))
		}
	}
	if m := p.BackoffMultiplier; math.IsNaN(m) || m != 0 && (m < 1 || m > 100) {
		return Errorf(CodeInvalidArgument, "restart.backoffMultiplier is %v; it must be 1..100 (0 = default %v)", m, DefaultBackoffMultiplier)
	}
	if p.MaxRestarts != nil && (*p.MaxRestarts < 0 || *p.MaxRestarts > 1_000_000) {
		return Errorf(CodeInvalidArgument, "restart.maxRestarts is %d; it must be 0 (no limit)..1000000", *p.MaxRestarts)
	}
	return nil
}

// ResourceLimits bound a job's resources. The rlimits and niceness are
// applied by the child itself before it executes the program (they are
// inherited by everything it starts); MemoryMaxBytes and CPUWeight need a
// cgroup per job with the memory and cpu controllers. JobInfo.Limits says
// which were applied and why any were not.
type ResourceLimits struct {
	// MaxOpenFiles is RLIMIT_NOFILE (soft and hard).
	MaxOpenFiles uint64 `msgpack:"maxOpenFiles,omitempty" json:"maxOpenFiles,omitempty"`
	// MaxAddressSpaceBytes is RLIMIT_AS (soft and hard).
	MaxAddressSpaceBytes uint64 `msgpack:"maxAddressSpaceBytes,omitempty" json:"maxAddressSpaceBytes,omitempty"`
	// Nice is the CPU niceness (-20..19; below the supervisor's own needs
	// privilege).
	Nice *int `msgpack:"nice,omitempty" json:"nice,omitempty"`
	// MemoryMaxBytes is the cgroup memory.max of the job.
	MemoryMaxBytes int64 `msgpack:"memoryMaxBytes,omitempty" json:"memoryMaxBytes,omitempty"`
	// CPUWeight is the cgroup cpu.weight of the job (1..10000, 100 = normal).
	CPUWeight int `msgpack:"cpuWeight,omitempty" json:"cpuWeight,omitempty"`
}

func (l *ResourceLimits) validate() error {
	switch {
	case l.MaxOpenFiles > 1<<20:
		return Errorf(CodeInvalidArgument, "limits.maxOpenFiles is %d; the most is %d", l.MaxOpenFiles, 1<<20)
	case l.MaxAddressSpaceBytes != 0 && l.MaxAddressSpaceBytes < 1<<20:
		return Errorf(CodeInvalidArgument, "limits.maxAddressSpaceBytes is %d; at least 1 MiB (no program starts with less)", l.MaxAddressSpaceBytes)
	case l.Nice != nil && (*l.Nice < -20 || *l.Nice > 19):
		return Errorf(CodeInvalidArgument, "limits.nice is %d; it must be -20..19", *l.Nice)
	case l.MemoryMaxBytes < 0 || l.MemoryMaxBytes != 0 && l.MemoryMaxBytes < 1<<20:
		return Errorf(CodeInvalidArgument, "limits.memoryMaxBytes is %d; at least 1 MiB", l.MemoryMaxBytes)
	case l.CPUWeight < 0 || l.CPUWeight > 10000:
		return Errorf(CodeInvalidArgument, "limits.cpuWeight is %d; it must be 1..10000", l.CPUWeight)
	}
	return nil
}

// LimitsInfo reports which resource limits a job's current run got.
type LimitsInfo struct {
	// Applied lists what was set, e.g. "maxOpenFiles=64", "memory.max=268435456".
	Applied []string `msgpack:"applied,omitempty" json:"applied,omitempty"`
	// Unavailable maps a requested limit to the reason it was not applied.
	Unavailable map[string]string `msgpack:"unavailable,omitempty" json:"unavailable,omitempty"`
}

// validateService checks the service-related spawn arguments.
func (a *SpawnArgs) validateService() error {
	if a.Restart != nil {
		if err := a.Restart.validate(); err != nil {
			return err
		}
	}
	if a.Limits != nil {
		if err := a.Limits.validate(); err != nil {
			return err
		}
	}
	if a.WatchdogIntervalMs < 0 || a.WatchdogIntervalMs > MaxTimeoutMs {
		return Errorf(CodeInvalidArgument, "watchdogIntervalMs is %d; it must be 0..%d", a.WatchdogIntervalMs, int64(MaxTimeoutMs))
	}
	if a.WatchdogIntervalMs > 0 && !a.Notify {
		return Errorf(CodeInvalidArgument, "watchdogIntervalMs needs notify: true (the job sends WATCHDOG=1 to NOTIFY_SOCKET)")
	}
	for k := range a.Env {
		if a.Notify && (k == "NOTIFY_SOCKET" || strings.HasPrefix(k, "WATCHDOG_")) {
			return Errorf(CodeInvalidArgument, "env %s is set by the supervisor for notify jobs", k)
		}
	}
	return nil
}

// RestartingPayload is the payload of KindRestarting: a run of a service
// job ended and the next one starts after DelayMs.
type RestartingPayload struct {
	// Attempt is the run that ended; NextAttempt = Attempt+1.
	Attempt     int    `msgpack:"attempt" json:"attempt"`
	NextAttempt int    `msgpack:"nextAttempt" json:"nextAttempt"`
	Reason      Reason `msgpack:"reason" json:"reason"`
	ExitCode    *int   `msgpack:"exitCode,omitempty" json:"exitCode,omitempty"`
	Signal      string `msgpack:"signal,omitempty" json:"signal,omitempty"`
	Error       string `msgpack:"error,omitempty" json:"error,omitempty"`
	DurationMs  int64  `msgpack:"durationMs" json:"durationMs"`
	DelayMs     int64  `msgpack:"delayMs" json:"delayMs"`
	// RestartAt is when the next run starts (ms since the epoch).
	RestartAt int64 `msgpack:"restartAt" json:"restartAt"`
	// RestartsInWindow counts run ends within the restart window,
	// this one included.
	RestartsInWindow int `msgpack:"restartsInWindow" json:"restartsInWindow"`
}

// ReadyPayload is the payload of KindReady: a notify job sent READY=1.
type ReadyPayload struct {
	Attempt int    `msgpack:"attempt" json:"attempt"`
	Status  string `msgpack:"status,omitempty" json:"status,omitempty"`
}

// RunRecord is one ended run of a job, as kept in its history.
type RunRecord struct {
	Attempt    int    `msgpack:"attempt" json:"attempt"`
	StartedAt  int64  `msgpack:"startedAt" json:"startedAt"`
	EndedAt    int64  `msgpack:"endedAt" json:"endedAt"`
	DurationMs int64  `msgpack:"durationMs" json:"durationMs"`
	Pid        int    `msgpack:"pid,omitempty" json:"pid,omitempty"`
	Reason     Reason `msgpack:"reason" json:"reason"`
	ExitCode   *int   `msgpack:"exitCode,omitempty" json:"exitCode,omitempty"`
	Signal     string `msgpack:"signal,omitempty" json:"signal,omitempty"`
	Error      string `msgpack:"error,omitempty" json:"error,omitempty"`
	// Restarted is true when the supervisor started another run after it.
	Restarted bool `msgpack:"restarted" json:"restarted"`
	// Tail is the run's last output lines (at most HistoryLines, at most
	// HistoryTailBytes in all; longer lines are cut).
	Tail []string `msgpack:"tail" json:"tail"`
}

// History limits.
const (
	// HistoryRuns is how many ended runs a job's history keeps.
	HistoryRuns = 20
	// HistoryLines is how many output lines a run record keeps.
	HistoryLines = 50
	// HistoryTailBytes bounds a run record's output lines.
	HistoryTailBytes = 16 << 10
)

// HistoryResult is the result of OpHistory: ended runs, oldest first.
type HistoryResult struct {
	JobID string      `msgpack:"jobId" json:"jobId"`
	Runs  []RunRecord `msgpack:"runs" json:"runs"`
}
