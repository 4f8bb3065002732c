package protocol

import (
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// Request is the control-plane request envelope.
type Request struct {
	// V is the protocol version; must equal Version.
	V int `msgpack:"v" json:"v"`
	// ID is chosen by the client and echoed in the reply; it lets a DEALER
	// client match replies to requests. Empty is allowed for REQ clients.
	ID string `msgpack:"id" json:"id"`
	// Op is the operation.
	Op Op `msgpack:"op" json:"op"`
	// Args holds the op's arguments (a msgpack map), or nil.
	Args msgpack.RawMessage `msgpack:"args,omitempty" json:"args,omitempty"`
}

// Reply is the control-plane reply envelope. Exactly one of Result and
// Error is set: OK tells which.
type Reply struct {
	V      int                `msgpack:"v" json:"v"`
	ID     string             `msgpack:"id" json:"id"`
	OK     bool               `msgpack:"ok" json:"ok"`
	Result msgpack.RawMessage `msgpack:"result,omitempty" json:"result,omitempty"`
	Error  *Error             `msgpack:"error,omitempty" json:"error,omitempty"`
}

// SpawnArgs are the arguments of OpSpawn. Exactly one of Argv and Shell is set.
type SpawnArgs struct {
	// JobID, when set, is the new job's id, chosen by the caller (see
	// ValidJobIDChoice); empty means the supervisor makes one up. A spawn
	// naming a job the supervisor knows (running, or finished and still
	// retained) is refused with CodeAlreadyExists and starts nothing: a
	// caller that got no reply can send the same spawn again safely.
	JobID string `msgpack:"jobId,omitempty" json:"jobId,omitempty"`
	// Name, when set, names the job (see ValidJobName): every op that
	// takes a jobId takes the name too. A name is unique among the jobs
	// not finished: a spawn naming one that such a job holds is refused
	// with CodeNameTaken and starts nothing. Empty: no name.
	Name string `msgpack:"name,omitempty" json:"name,omitempty"`
	// Argv is the program and its arguments, run without a shell. Argv[0]
	// is looked up in the job's PATH when it has no slash.
	Argv []string `msgpack:"argv,omitempty" json:"argv,omitempty"`
	// Shell is a command string run as /bin/sh -c Shell.
	Shell string `msgpack:"shell,omitempty" json:"shell,omitempty"`
	// Cwd is the working directory; empty means the supervisor's.
	Cwd string `msgpack:"cwd,omitempty" json:"cwd,omitempty"`
	// Env is added to (EnvMode "inherit" or empty) or replaces (EnvMode
	// "replace") the supervisor's environment.
	Env     map[string]string `msgpack:"env,omitempty" json:"env,omitempty"`
	EnvMode string            `msgpack:"envMode,omitempty" json:"envMode,omitempty"`
	// TimeoutMs is the overall timeout; 0 means the server default.
	TimeoutMs int64 `msgpack:"timeoutMs,omitempty" json:"timeoutMs,omitempty"`
	// NoOutputTimeoutMs kills the job after this long without output; 0 disables.
	NoOutputTimeoutMs int64 `msgpack:"noOutputTimeoutMs,omitempty" json:"noOutputTimeoutMs,omitempty"`
	// GraceMs is the SIGTERM-to-SIGKILL grace; 0 means the server default.
	GraceMs int64 `msgpack:"graceMs,omitempty" json:"graceMs,omitempty"`
	// Labels are free-form metadata echoed in status.
	Labels map[string]string `msgpack:"labels,omitempty" json:"labels,omitempty"`
	// SessionID groups jobs of one caller session; echoed in status.
	SessionID string `msgpack:"sessionId,omitempty" json:"sessionId,omitempty"`
	// Stdin keeps a pipe to the job's stdin open for the write op; without
	// it (and without Pty) stdin is /dev/null.
	Stdin bool `msgpack:"stdin,omitempty" json:"stdin,omitempty"`
	// StrictOwnership ends the job with reason ownership-escape as soon as
	// one of its processes is found outside its process group or session
	// (needs a cgroup per job to see it); by default such processes are
	// only reported and ended with the job.
	StrictOwnership bool `msgpack:"strictOwnership,omitempty" json:"strictOwnership,omitempty"`
	// Pty runs the job on a pseudo-terminal (its own session, the terminal
	// as its controlling tty); stdout and stderr both arrive as job.stdout.
	Pty *PtyArgs `msgpack:"pty,omitempty" json:"pty,omitempty"`
	// Restart makes the job a service restarted by policy (see
	// RestartPolicy); nil or policy "never" runs it once. A service has no
	// overall timeout unless TimeoutMs is set (then it bounds each run).
	Restart *RestartPolicy `msgpack:"restart,omitempty" json:"restart,omitempty"`
	// Notify gives the job NOTIFY_SOCKET (the systemd notify protocol):
	// READY=1 marks it ready (job.ready), STATUS= sets its status text,
	// WATCHDOG=1 feeds the watchdog, STOPPING=1 is recorded.
	Notify bool `msgpack:"notify,omitempty" json:"notify,omitempty"`
	// WatchdogIntervalMs (needs Notify): a run that does not send
	// WATCHDOG=1 within this interval (counted from its start, then from
	// each ping) is killed with reason watchdog and restarted by policy.
	// The job gets WATCHDOG_USEC and WATCHDOG_PID like under systemd.
	WatchdogIntervalMs int64 `msgpack:"watchdogIntervalMs,omitempty" json:"watchdogIntervalMs,omitempty"`
	// Limits bound the job's resources (rlimits, niceness, cgroup limits).
	Limits *ResourceLimits `msgpack:"limits,omitempty" json:"limits,omitempty"`
	// WaitMs > 0 holds the reply until the job has finished (or WaitMs
	// passed): spawn and wait in one round trip. Not part of the job.
	WaitMs int64 `msgpack:"waitMs,omitempty" json:"waitMs,omitempty"`
	// Pace makes the connection that sends the spawn pace the job's
	// output from its first byte (see OpPace). Not part of the job. In
	// pkg/client, follow such a job with Follow(..., Paced()) or use
	// Start (whose Job paces it); Poll does not pace: a job spawned with
	// Pace and only polled waits at its pace window until the
	// supervisor's --pace-stall-limit lets it go.
	Pace bool `msgpack:"pace,omitempty" json:"pace,omitempty"`
	// Queue: past the job limit (--max-jobs), the job waits in state
	// queued for a free slot, in the order spawned, instead of the spawn
	// being refused with CodeTooManyJobs (still refused when the queue
	// holds --max-queued jobs). One-shot jobs only. A queued job has no
	// process; a kill ends it unstarted; its timeouts count from its
	// start.
	Queue bool `msgpack:"queue,omitempty" json:"queue,omitempty"`
	// Output says where the job's output is kept besides the ring buffer:
	// OutputDisk ("disk": also appended to files, readable by poll after
	// it left the ring or the job left memory, and after a supervisor
	// restart) or OutputMemory ("memory": the ring buffer only). Empty:
	// the supervisor's default (--output-disk: services, by default).
	Output string `msgpack:"output,omitempty" json:"output,omitempty"`
}

// Values of SpawnArgs.Output.
const (
	OutputDisk   = "disk"
	OutputMemory = "memory"
)

// PtyArgs sizes a job's terminal: Rows and Cols 1..10000, zero meaning
// 24x80 (ints, not uint16: a value out of range is refused, where a
// 16-bit field would have taken it modulo 65536); empty Term means
// xterm-256color (an explicit TERM in Env wins).
type PtyArgs struct {
	Rows int    `msgpack:"rows,omitempty" json:"rows,omitempty"`
	Cols int    `msgpack:"cols,omitempty" json:"cols,omitempty"`
	Term string `msgpack:"term,omitempty" json:"term,omitempty"`
}

// WriteArgs are the arguments of OpWrite.
type WriteArgs struct {
	JobID string `msgpack:"jobId" json:"jobId"`
	// Data goes to the job's stdin pipe or terminal.
	Data []byte `msgpack:"data,omitempty" json:"data,omitempty"`
	// EOF, after Data: closes a pipe job's stdin; sends the terminal's EOF
	// character (Ctrl-D) to a PTY job.
	EOF bool `msgpack:"eof,omitempty" json:"eof,omitempty"`
	// Typed marks input a person types at a terminal (execctl attach): a
	// PTY job's terminal treats it as its own keyboard's (a line over the
	// line-mode limit is cut as the terminal cuts it, not refused).
	Typed bool `msgpack:"typed,omitempty" json:"typed,omitempty"`
}

// WriteResult is the result of OpWrite.
type WriteResult struct {
	Written int     `msgpack:"written" json:"written"`
	Job     JobInfo `msgpack:"job" json:"job"`
}

// ResizeArgs are the arguments of OpResize.
type ResizeArgs struct {
	JobID string `msgpack:"jobId" json:"jobId"`
	// Rows and Cols are 1..10000.
	Rows int `msgpack:"rows" json:"rows"`
	Cols int `msgpack:"cols" json:"cols"`
}

// Env modes of SpawnArgs.EnvMode.
const (
	EnvInherit = "inherit"
	EnvReplace = "replace"
)

// SpawnResult is the result of OpSpawn.
type SpawnResult struct {
	JobID string  `msgpack:"jobId" json:"jobId"`
	Job   JobInfo `msgpack:"job" json:"job"`
	// Finished (a spawn with WaitMs, and OpWait) says the job has
	// finished: Job is its final state and its terminal event was
	// published. False when the wait ran out first.
	Finished bool `msgpack:"finished,omitempty" json:"finished,omitempty"`
}

// WaitArgs are the arguments of OpWait (its result is a SpawnResult).
type WaitArgs struct {
	JobID string `msgpack:"jobId" json:"jobId"`
	// WaitMs bounds the wait; 0 means DefaultWaitMs.
	WaitMs int64 `msgpack:"waitMs,omitempty" json:"waitMs,omitempty"`
}

// CancelArgs are the arguments of OpCancel.
type CancelArgs struct {
	// RequestID is the id of the held request (spawn with waitMs, or
	// wait) sent earlier on the same connection.
	RequestID string `msgpack:"requestId" json:"requestId"`
}

// PaceArgs are the arguments of OpPace.
type PaceArgs struct {
	JobID string `msgpack:"jobId" json:"jobId"`
	// Offset is the end of the job's output the connection has taken
	// (the offset after the last byte it received).
	Offset int64 `msgpack:"offset" json:"offset"`
	// Release ends the connection's pacing of the job.
	Release bool `msgpack:"release,omitempty" json:"release,omitempty"`
}

// PaceResult is the result of OpPace.
type PaceResult struct {
	// WindowBytes is how far past Offset the job's output is read: pace
	// again well before the output reaches Offset+WindowBytes (say each
	// quarter window) for the job not to wait.
	WindowBytes int64 `msgpack:"windowBytes" json:"windowBytes"`
	// Job is the job as it is now (its outputEnd, outputPaced, state).
	Job JobInfo `msgpack:"job" json:"job"`
}

// CancelResult is the result of OpCancel.
type CancelResult struct {
	// Cancelled is false when no reply was held for that id on this
	// connection (already answered, or never held).
	Cancelled bool `msgpack:"cancelled" json:"cancelled"`
	// JobID is the job the cancelled request waited for (a spawn's new
	// job: it keeps running).
	JobID string `msgpack:"jobId,omitempty" json:"jobId,omitempty"`
}

// JobArgs are the arguments of ops that name one job (OpRemove, OpStatus).
// For OpStatus an empty JobID means every job. Here and in every op's
// arguments, JobID may also be a job's name (see SpawnArgs.Name): a job
// of that id first, else the job not finished that holds the name, else
// the one of that name that finished last.
type JobArgs struct {
	JobID string `msgpack:"jobId" json:"jobId"`
}

// KillArgs are the arguments of OpKill.
type KillArgs struct {
	JobID string `msgpack:"jobId" json:"jobId"`
	// Signal is empty or "SIGTERM" for the termination path (SIGTERM to the
	// group, grace, SIGKILL), "SIGKILL" for an immediate kill of the group;
	// any other signal name (e.g. "SIGINT", "SIGHUP") is delivered to the
	// process group once and does not by itself end the job.
	Signal string `msgpack:"signal,omitempty" json:"signal,omitempty"`
}

// KillResult is the result of OpKill.
type KillResult struct {
	Job JobInfo `msgpack:"job" json:"job"`
	// AlreadyFinished is true when the job had finished before the request.
	AlreadyFinished bool `msgpack:"alreadyFinished" json:"alreadyFinished"`
}

// StatusResult is the result of OpStatus: Job for one job, Jobs for all.
type StatusResult struct {
	Job  *JobInfo  `msgpack:"job,omitempty" json:"job,omitempty"`
	Jobs []JobInfo `msgpack:"jobs,omitempty" json:"jobs,omitempty"`
}

// ListJobsArgs are the arguments of OpListJobs.
type ListJobsArgs struct {
	// State filters by state; empty means all.
	State State `msgpack:"state,omitempty" json:"state,omitempty"`
	// SessionID filters by session; empty means all.
	SessionID string `msgpack:"sessionId,omitempty" json:"sessionId,omitempty"`
	// Limit is the most jobs one reply carries; 0 means as many as fit in
	// MaxListBytes (a reply always carries at least one job when any is
	// left).
	Limit int `msgpack:"limit,omitempty" json:"limit,omitempty"`
	// After continues a listing: the Next of the previous reply. Empty
	// means from the first job.
	After string `msgpack:"after,omitempty" json:"after,omitempty"`
	// Brief leaves each job's argv, shell, cwd and labels out.
	Brief bool `msgpack:"brief,omitempty" json:"brief,omitempty"`
	// IDPrefix filters by the start of the job id (as a client resolving
	// an abbreviated id asks); empty means all.
	IDPrefix string `msgpack:"idPrefix,omitempty" json:"idPrefix,omitempty"`
	// Name keeps the named jobs whose name matches this glob (see
	// ValidNamePattern, MatchName); empty means all, named or not.
	Name string `msgpack:"name,omitempty" json:"name,omitempty"`
	// Labels keeps the jobs that have every one of these labels with
	// its value; empty means all.
	Labels map[string]string `msgpack:"labels,omitempty" json:"labels,omitempty"`
}

// ListJobsResult is the result of OpListJobs.
type ListJobsResult struct {
	Jobs []JobInfo `msgpack:"jobs" json:"jobs"`
	// More says that jobs matching the filters follow these: ask again
	// with After set to Next.
	More bool `msgpack:"more,omitempty" json:"more,omitempty"`
	// Next is the cursor of the last job returned, when More.
	Next string `msgpack:"next,omitempty" json:"next,omitempty"`
}

// ListCursor returns the list-jobs cursor of a job (what a reply's Next
// is when it is its last job): list-jobs orders jobs by createdAt, then
// by the order they were created in (n, the supervisor's count), and a
// cursor is "<createdAt>:<n>:<jobId>", so that it keeps its place when
// that job is removed meanwhile.
func ListCursor(createdAt int64, n uint64, jobID string) string {
	return strconv.FormatInt(createdAt, 10) + ":" + strconv.FormatUint(n, 10) + ":" + jobID
}

// ParseListCursor splits a list-jobs cursor (see ListCursor); n is 0 in
// a cursor of the older form "<createdAt>:<jobId>".
func ParseListCursor(s string) (createdAt int64, n uint64, jobID string, err error) {
	bad := Errorf(CodeInvalidArgument, "after %.64q is not a list-jobs cursor (the next of a previous reply)", s)
	ts, rest, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, "", bad
	}
	if createdAt, err = strconv.ParseInt(ts, 10, 64); err != nil || createdAt < 0 {
		return 0, 0, "", bad
	}
	if ns, id, ok := strings.Cut(rest, ":"); ok {
		if n, err = strconv.ParseUint(ns, 10, 64); err != nil {
			return 0, 0, "", bad
		}
		rest = id
	}
	if rest == "" || len(rest) > MaxIDBytes {
		return 0, 0, "", bad
	}
	return createdAt, n, rest, nil
}

// RemoveResult is the result of OpRemove.
type RemoveResult struct {
	JobID string `msgpack:"jobId" json:"jobId"`
}

// JobInfo describes a job.
type JobInfo struct {
	JobID string `msgpack:"jobId" json:"jobId"`
	// Name is the name given at spawn ("": none).
	Name      string            `msgpack:"name,omitempty" json:"name,omitempty"`
	State     State             `msgpack:"state" json:"state"`
	Argv      []string          `msgpack:"argv,omitempty" json:"argv,omitempty"`
	Shell     string            `msgpack:"shell,omitempty" json:"shell,omitempty"`
	Cwd       string            `msgpack:"cwd,omitempty" json:"cwd,omitempty"`
	Labels    map[string]string `msgpack:"labels,omitempty" json:"labels,omitempty"`
	SessionID string            `msgpack:"sessionId,omitempty" json:"sessionId,omitempty"`
	// Pid and Pgid are 0 until the process started.
	Pid  int `msgpack:"pid" json:"pid"`
	Pgid int `msgpack:"pgid" json:"pgid"`
	// Times in ms since the Unix epoch; 0 when not reached.
	CreatedAt    int64 `msgpack:"createdAt" json:"createdAt"`
	StartedAt    int64 `msgpack:"startedAt" json:"startedAt"`
	EndedAt      int64 `msgpack:"endedAt" json:"endedAt"`
	LastOutputAt int64 `msgpack:"lastOutputAt" json:"lastOutputAt"`
	// Reason is empty until the job is exited.
	Reason Reason `msgpack:"reason,omitempty" json:"reason,omitempty"`
	// ExitCode is set when the process exited (nil when killed by a signal
	// or never started).
	ExitCode *int `msgpack:"exitCode,omitempty" json:"exitCode,omitempty"`
	// Signal is the name of the signal that killed the process ("SIGTERM"), if any.
	Signal string `msgpack:"signal,omitempty" json:"signal,omitempty"`
	// Error explains a spawn-error or another abnormal end.
	Error string `msgpack:"error,omitempty" json:"error,omitempty"`
	// TimeoutMs and NoOutputTimeoutMs are the effective timeouts (0 = none).
	TimeoutMs         int64 `msgpack:"timeoutMs" json:"timeoutMs"`
	NoOutputTimeoutMs int64 `msgpack:"noOutputTimeoutMs" json:"noOutputTimeoutMs"`
	// StdoutBytes and StderrBytes count all output ever produced.
	StdoutBytes int64 `msgpack:"stdoutBytes" json:"stdoutBytes"`
	StderrBytes int64 `msgpack:"stderrBytes" json:"stderrBytes"`
	// RetainedFrom is the output offset of the oldest byte still retained;
	// OutputEnd is the offset just past the newest byte.
	RetainedFrom int64 `msgpack:"retainedFrom" json:"retainedFrom"`
	OutputEnd    int64 `msgpack:"outputEnd" json:"outputEnd"`
	// LastSeq is the seq of the job's newest event.
	LastSeq uint64 `msgpack:"lastSeq" json:"lastSeq"`
	// Pty jobs report their terminal size and whether the program turned
	// bracketed paste on; StdinOpen says the write op can still reach stdin.
	Pty            bool   `msgpack:"pty,omitempty" json:"pty,omitempty"`
	Rows           uint16 `msgpack:"rows,omitempty" json:"rows,omitempty"`
	Cols           uint16 `msgpack:"cols,omitempty" json:"cols,omitempty"`
	BracketedPaste bool   `msgpack:"bracketedPaste,omitempty" json:"bracketedPaste,omitempty"`
	StdinOpen      bool   `msgpack:"stdinOpen,omitempty" json:"stdinOpen,omitempty"`
	// OutputHeld is set while the job's output is not read because the
	// supervisor's journal has not been written for too long (a full
	// disk): the job blocks on its output until a write lands.
	OutputHeld bool `msgpack:"outputHeld,omitempty" json:"outputHeld,omitempty"`
	// OutputPaced is set while the job's output is not read because a
	// client pacing it (spawn's pace, the pace op) has not taken it yet.
	OutputPaced bool `msgpack:"outputPaced,omitempty" json:"outputPaced,omitempty"`
	// OutputDisk is set while the job's output is also written to files
	// (spawn's output); OutputDiskError says why that stopped (a full
	// disk: the job's output is in memory only from then on).
	OutputDisk      bool   `msgpack:"outputDisk,omitempty" json:"outputDisk,omitempty"`
	OutputDiskError string `msgpack:"outputDiskError,omitempty" json:"outputDiskError,omitempty"`
	// Ownership is how the job's processes are tracked: "cgroup" (a cgroup
	// of its own) or "pgid" (its process group, or session for PTY jobs).
	Ownership string `msgpack:"ownership,omitempty" json:"ownership,omitempty"`
	// Cgroup is the path of the job's (current run's) cgroup directory
	// when it has one.
	Cgroup string `msgpack:"cgroup,omitempty" json:"cgroup,omitempty"`
	// Usage is the resource use of the job's process tree, sampled when
	// status or list-jobs is answered; absent for finished jobs.
	Usage *Usage `msgpack:"usage,omitempty" json:"usage,omitempty"`

	// Service jobs (spawned with a restart policy) and notify jobs.
	// Restart is the policy ("on-failure", "always"; empty for one-shot
	// jobs). Attempt is the number of the current (or last) run, from 1.
	// Restarts counts automatic and manual restarts; RestartsInWindow the
	// run ends within the policy's window. NextRestartAt is set while the
	// job is restarting. StartedAt is the current run's start; UptimeMs
	// its age while it runs.
	Restart          string `msgpack:"restart,omitempty" json:"restart,omitempty"`
	Attempt          int    `msgpack:"attempt,omitempty" json:"attempt,omitempty"`
	Restarts         int    `msgpack:"restarts,omitempty" json:"restarts,omitempty"`
	RestartsInWindow int    `msgpack:"restartsInWindow,omitempty" json:"restartsInWindow,omitempty"`
	NextRestartAt    int64  `msgpack:"nextRestartAt,omitempty" json:"nextRestartAt,omitempty"`
	UptimeMs         int64  `msgpack:"uptimeMs,omitempty" json:"uptimeMs,omitempty"`
	// Notify jobs: Ready is set once the current run sent READY=1;
	// NotifyStatus is its last STATUS=; LastWatchdogAt its last
	// WATCHDOG=1; Stopping is set after STOPPING=1.
	Notify         bool   `msgpack:"notify,omitempty" json:"notify,omitempty"`
	Ready          bool   `msgpack:"ready,omitempty" json:"ready,omitempty"`
	NotifyStatus   string `msgpack:"notifyStatus,omitempty" json:"notifyStatus,omitempty"`
	LastWatchdogAt int64  `msgpack:"lastWatchdogAt,omitempty" json:"lastWatchdogAt,omitempty"`
	Stopping       bool   `msgpack:"stopping,omitempty" json:"stopping,omitempty"`
	// Limits says which requested resource limits the current run got.
	Limits *LimitsInfo `msgpack:"limits,omitempty" json:"limits,omitempty"`
}

// Usage is the resource use of a job's current run: of its cgroup (every
// process it started, those that left its process group included), or
// without cgroups of its process group (for PTY jobs its session).
type Usage struct {
	// Processes counts the live processes.
	Processes int `msgpack:"processes" json:"processes"`
	// RSSBytes is the live processes' resident memory; with the cgroup's
	// memory controller enabled, the anonymous and mapped file memory
	// charged to the cgroup (memory.stat anon + file_mapped: shared
	// pages counted once).
	RSSBytes int64 `msgpack:"rssBytes" json:"rssBytes"`
	// CPUSeconds is user+system time: with a cgroup, of every process
	// that ran in it during this run, ended ones included; without, of
	// the live processes and of the children they have reaped.
	CPUSeconds float64 `msgpack:"cpuSeconds" json:"cpuSeconds"`
	// CPUPercent is the CPU use since the previous sample of this job (or
	// since it started); 100 = one core.
	CPUPercent float64 `msgpack:"cpuPercent" json:"cpuPercent"`
	SampledAt  int64   `msgpack:"sampledAt" json:"sampledAt"`
}

// Finished reports whether the job has reached StateExited.
func (j *JobInfo) Finished() bool { return j.State == StateExited }

// PollArgs are the arguments of OpPoll.
type PollArgs struct {
	JobID string `msgpack:"jobId" json:"jobId"`
	// Cursor is a byte offset into the job's combined output (stdout and
	// stderr interleaved as produced); 0 reads from the start.
	Cursor int64 `msgpack:"cursor" json:"cursor"`
	// MaxBytes caps the output returned; 0 means MaxPollBytes.
	MaxBytes int64 `msgpack:"maxBytes,omitempty" json:"maxBytes,omitempty"`
}

// PollResult is the result of OpPoll.
type PollResult struct {
	Job JobInfo `msgpack:"job" json:"job"`
	// Chunks are the retained output at or after Cursor, in order.
	Chunks []Chunk `msgpack:"chunks" json:"chunks"`
	// Next is the cursor for the following poll.
	Next int64 `msgpack:"next" json:"next"`
	// Truncated is true when output between Cursor and the first chunk
	// (or Next) is gone: LostBytes says how many bytes were evicted, and
	// CrashGap that offsets a crashed supervisor may have used for output
	// it never journaled lie there too (how much of it is unknown).
	Truncated bool  `msgpack:"truncated" json:"truncated"`
	LostBytes int64 `msgpack:"lostBytes" json:"lostBytes"`
	CrashGap  bool  `msgpack:"crashGap,omitempty" json:"crashGap,omitempty"`
	// More is true when something remains past Next: retained output
	// (MaxBytes was reached), or offsets skipped after a supervisor crash
	// that the poll from Next reports (CrashGap).
	More bool `msgpack:"more" json:"more"`
	// InstanceID is the answering supervisor's (as in health): a client
	// that sees it change knows the supervisor restarted.
	InstanceID string `msgpack:"instanceId,omitempty" json:"instanceId,omitempty"`
}

// Chunk is a piece of a job's output.
type Chunk struct {
	Seq    uint64 `msgpack:"seq" json:"seq"`
	Stream Stream `msgpack:"stream" json:"stream"`
	// Offset is the position of Data[0] in the job's combined output.
	Offset int64  `msgpack:"offset" json:"offset"`
	Data   []byte `msgpack:"data" json:"data"`
}

// SubscribeArgs are the arguments of OpSubscribe.
type SubscribeArgs struct {
	JobID string `msgpack:"jobId" json:"jobId"`
	// FromSeq is the first seq wanted (>= 1).
	FromSeq uint64 `msgpack:"fromSeq" json:"fromSeq"`
	// Limit caps the events returned; 0 means MaxSubscribeEvents.
	Limit int `msgpack:"limit,omitempty" json:"limit,omitempty"`
	// Flush publishes the job's output still in its merge window (see
	// --chunk-merge-interval) before the reply is made, so that the reply
	// holds every byte read so far; false leaves the windows alone.
	Flush bool `msgpack:"flush,omitempty" json:"flush,omitempty"`
}

// SubscribeResult is the result of OpSubscribe.
type SubscribeResult struct {
	Job JobInfo `msgpack:"job" json:"job"`
	// Events are the retained events with seq >= FromSeq, in seq order.
	Events []Event `msgpack:"events" json:"events"`
	// Missing lists seq ranges in [FromSeq, LastSeq] no longer retained.
	Missing []SeqRange `msgpack:"missing,omitempty" json:"missing,omitempty"`
	// MissingBytes is the output size of the missing events: exact where
	// the events around a range (or the supervisor's index of its last
	// 4096 evicted events) tell where its output begins and ends, else an
	// upper bound (at most all evicted output).
	MissingBytes int64 `msgpack:"missingBytes" json:"missingBytes"`
	// More is true when Limit cut the reply short.
	More bool `msgpack:"more" json:"more"`
	// InstanceID is the answering supervisor's (as in health): a client
	// that sees it change knows the supervisor restarted.
	InstanceID string `msgpack:"instanceId,omitempty" json:"instanceId,omitempty"`
	// HeartbeatIntervalMs is the supervisor's heartbeat period (as in
	// HeartbeatPayload), for a follower that has not heard one yet.
	HeartbeatIntervalMs int64 `msgpack:"heartbeatIntervalMs,omitempty" json:"heartbeatIntervalMs,omitempty"`
}

// SeqRange is an inclusive range of seqs.
type SeqRange struct {
	From uint64 `msgpack:"from" json:"from"`
	To   uint64 `msgpack:"to" json:"to"`
	// Bytes is the output the range's events carried, where the
	// supervisor knows it exactly (in subscribe's missing; 0 otherwise).
	Bytes int64 `msgpack:"bytes,omitempty" json:"bytes,omitempty"`
	// NoOutput says the range's events carried no output, as the
	// supervisor knows exactly (events other than output: job.started,
	// job.ready, ...); false: they did (Bytes), or it is not known.
	NoOutput bool `msgpack:"noOutput,omitempty" json:"noOutput,omitempty"`
}

// HealthResult is the result of OpHealth.
type HealthResult struct {
	OK         bool   `msgpack:"ok" json:"ok"`
	InstanceID string `msgpack:"instanceId" json:"instanceId"`
	Protocol   int    `msgpack:"protocol" json:"protocol"`
	Version    string `msgpack:"version" json:"version"`
	Pid        int    `msgpack:"pid" json:"pid"`
	StartedAt  int64  `msgpack:"startedAt" json:"startedAt"`
	UptimeMs   int64  `msgpack:"uptimeMs" json:"uptimeMs"`
	// ActiveJobs counts jobs not yet exited (queued ones aside: those are
	// QueuedJobs); TotalJobs all known jobs.
	ActiveJobs int  `msgpack:"activeJobs" json:"activeJobs"`
	QueuedJobs int  `msgpack:"queuedJobs,omitempty" json:"queuedJobs,omitempty"`
	TotalJobs  int  `msgpack:"totalJobs" json:"totalJobs"`
	MaxJobs    int  `msgpack:"maxJobs" json:"maxJobs"`
	Draining   bool `msgpack:"draining" json:"draining"`
	// Cgroups is true when every job gets a cgroup of its own; CgroupsNote
	// says why not otherwise.
	Cgroups     bool   `msgpack:"cgroups" json:"cgroups"`
	CgroupsNote string `msgpack:"cgroupsNote,omitempty" json:"cgroupsNote,omitempty"`
	// JournalError is set while journal writes fail (disk full, the
	// directory gone or read-only): since when and why. A crash now would
	// be recovered from an older journal.
	JournalError string `msgpack:"journalError,omitempty" json:"journalError,omitempty"`
}

// Event is the event-plane envelope. Payload depends on Kind.
type Event struct {
	V     int    `msgpack:"v" json:"v"`
	JobID string `msgpack:"jobId" json:"jobId"`
	// Seq is per job, contiguous from 1. Gap and heartbeat events are
	// outside the job sequence and carry Seq 0.
	Seq  uint64 `msgpack:"seq" json:"seq"`
	Ts   int64  `msgpack:"ts" json:"ts"`
	Kind Kind   `msgpack:"kind" json:"kind"`
	// Attempt is the run of a service job the event belongs to (from 1);
	// absent (0) for one-shot jobs and events outside the job sequence.
	Attempt int                `msgpack:"attempt,omitempty" json:"attempt,omitempty"`
	Payload msgpack.RawMessage `msgpack:"payload" json:"payload"`
}

// StartedPayload is the payload of KindStarted.
type StartedPayload struct {
	Pid       int               `msgpack:"pid" json:"pid"`
	Pgid      int               `msgpack:"pgid" json:"pgid"`
	Argv      []string          `msgpack:"argv,omitempty" json:"argv,omitempty"`
	Shell     string            `msgpack:"shell,omitempty" json:"shell,omitempty"`
	Cwd       string            `msgpack:"cwd,omitempty" json:"cwd,omitempty"`
	Labels    map[string]string `msgpack:"labels,omitempty" json:"labels,omitempty"`
	SessionID string            `msgpack:"sessionId,omitempty" json:"sessionId,omitempty"`
	// Attempt is the run number of a service job (absent for one-shot jobs).
	Attempt int `msgpack:"attempt,omitempty" json:"attempt,omitempty"`
}

// OutputPayload is the payload of KindStdout and KindStderr.
type OutputPayload struct {
	// Offset is the position of Data[0] in the job's combined output.
	Offset int64  `msgpack:"offset" json:"offset"`
	Data   []byte `msgpack:"data" json:"data"`
}

// ExitPayload is the payload of KindExited and KindFailed.
type ExitPayload struct {
	Reason     Reason `msgpack:"reason" json:"reason"`
	ExitCode   *int   `msgpack:"exitCode,omitempty" json:"exitCode,omitempty"`
	Signal     string `msgpack:"signal,omitempty" json:"signal,omitempty"`
	Error      string `msgpack:"error,omitempty" json:"error,omitempty"`
	DurationMs int64  `msgpack:"durationMs" json:"durationMs"`
	// OutputEnd is the total size of the job's combined output.
	OutputEnd int64 `msgpack:"outputEnd" json:"outputEnd"`
	// StdoutBytes, StderrBytes, EndedAt and LastOutputAt are the job's
	// JobInfo fields as of its end (so that a follower has them exact
	// without asking; absent from older supervisors).
	StdoutBytes  int64 `msgpack:"stdoutBytes,omitempty" json:"stdoutBytes,omitempty"`
	StderrBytes  int64 `msgpack:"stderrBytes,omitempty" json:"stderrBytes,omitempty"`
	EndedAt      int64 `msgpack:"endedAt,omitempty" json:"endedAt,omitempty"`
	LastOutputAt int64 `msgpack:"lastOutputAt,omitempty" json:"lastOutputAt,omitempty"`
}

// OwnershipEscapePayload is the payload of KindOwnershipEscape.
type OwnershipEscapePayload struct {
	// Pids are the processes found outside the job's group or session.
	Pids []int `msgpack:"pids" json:"pids"`
}

// GapPayload is the payload of KindGap: events From..To (inclusive) of the
// job were dropped before reaching the event socket.
type GapPayload struct {
	From  uint64 `msgpack:"from" json:"from"`
	To    uint64 `msgpack:"to" json:"to"`
	Count uint64 `msgpack:"count" json:"count"`
	// Bytes is the output the missing events carried, when known (a gap
	// pkg/client makes of subscribe's missing ranges; 0: unknown).
	Bytes int64 `msgpack:"bytes,omitempty" json:"bytes,omitempty"`
	// NoOutput says the missing events carried no output (a gap
	// pkg/client makes of a missing range that says so): no output was
	// lost, only events of other kinds.
	NoOutput bool `msgpack:"noOutput,omitempty" json:"noOutput,omitempty"`
}

// HeartbeatPayload is the payload of KindHeartbeat.
type HeartbeatPayload struct {
	InstanceID string `msgpack:"instanceId" json:"instanceId"`
	StartedAt  int64  `msgpack:"startedAt" json:"startedAt"`
	ActiveJobs int    `msgpack:"activeJobs" json:"activeJobs"`
	// Published and Dropped count events since the supervisor started.
	Published uint64 `msgpack:"published" json:"published"`
	Dropped   uint64 `msgpack:"dropped" json:"dropped"`
	// IntervalMs is the supervisor's heartbeat period: a subscriber that
	// heard nothing for a few of them may take its connection for broken.
	IntervalMs int64 `msgpack:"intervalMs,omitempty" json:"intervalMs,omitempty"`
}
