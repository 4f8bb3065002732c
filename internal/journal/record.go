package journal

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Record is what the journal keeps of one job: enough to report its fate,
// to recognise its process after a restart, and to restore its newest
// output and a service's supervision. It is the one model of a job's
// durable state: the engine takes a job's record (jobs.Job.Snapshot) and
// restores a job from one (jobs.Manager.Restore); the journal and its
// intents write and read it as JSON, the format below (older files load:
// every field added since is optional).
type Record struct {
	JobID string `json:"jobId"`
	// Name is the job's name, given at spawn (absent: none).
	Name      string            `json:"name,omitempty"`
	Argv      []string          `json:"argv,omitempty"`
	Shell     string            `json:"shell,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	SessionID string            `json:"sessionId,omitempty"`
	// Pid and Pgid of the job's process (pgid == pid: its own group).
	Pid  int `json:"pid"`
	Pgid int `json:"pgid"`
	// StartTicks is field 22 of /proc/<pid>/stat, BootID the kernel boot
	// id when it was read: together with Pid they identify the process.
	StartTicks uint64 `json:"startTicks"`
	BootID     string `json:"bootId"`
	// State is the wire state (queued, starting, running, exiting,
	// restarting, exited).
	State protocol.State `json:"state"`
	// Times in ms since the Unix epoch.
	CreatedAt    int64 `json:"createdAt"`
	StartedAt    int64 `json:"startedAt"`
	UpdatedAt    int64 `json:"updatedAt"`
	EndedAt      int64 `json:"endedAt,omitempty"`
	LastOutputAt int64 `json:"lastOutputAt"`
	// Fate, once exited.
	Reason   protocol.Reason `json:"reason,omitempty"`
	ExitCode *int            `json:"exitCode,omitempty"`
	Signal   string          `json:"signal,omitempty"`
	Error    string          `json:"error,omitempty"`
	// InstanceID is the supervisor run that owned the job (the writer's
	// to set: the engine leaves it empty).
	InstanceID string `json:"instanceId"`
	// Output accounting and the last bytes of output.
	StdoutBytes int64  `json:"stdoutBytes"`
	StderrBytes int64  `json:"stderrBytes"`
	OutputEnd   int64  `json:"outputEnd"`
	LastSeq     uint64 `json:"lastSeq"`
	TimeoutMs   int64  `json:"timeoutMs"`
	NoOutputMs  int64  `json:"noOutputTimeoutMs"`
	// OutputTail is the newest output (a few KiB, contiguous, base64 in
	// JSON), ending at TailEnd(); OutputTailSeq is the seq of its last
	// event.
	OutputTail    []byte `json:"outputTail,omitempty"`
	OutputTailSeq uint64 `json:"outputTailSeq,omitempty"`
	// OutputTailEnd is the offset just past OutputTail when that is below
	// OutputEnd (a job that skipped offsets after its last output);
	// absent: OutputEnd.
	OutputTailEnd int64 `json:"outputTailEnd,omitempty"`
	// OutputTailChunks are the output events OutputTail is made of, oldest
	// first (the first may be the end of a longer one); their lengths add
	// up to OutputTail's. Without them (older journals) the tail is
	// restored as one chunk.
	OutputTailChunks []TailChunk `json:"outputTailChunks,omitempty"`
	// OutputUnpublished is output read but not yet published as events
	// when the record was taken (inside the merge window), in the order
	// it was read: it follows OutputTail, from OutputEnd (StdoutBytes and
	// StderrBytes count it). A running job's only: one interrupted by its
	// supervisor's death gets it back as output events.
	OutputUnpublished []Unpublished `json:"outputUnpublished,omitempty"`
	// Pty jobs own a whole session (several process groups may be in it).
	Pty bool `json:"pty,omitempty"`
	// Rows and Cols are a PTY job's terminal size as last set (a resumed
	// service's next run gets it).
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Members are processes of the job's group (pid and start ticks) seen
	// at the last periodic scan: proof of ownership if the leader is gone
	// (the writer's to set: the engine leaves them empty).
	Members []Member `json:"members,omitempty"`
	// Cgroup is the directory of the job's cgroup while it runs (cgroups
	// are reused, so finished jobs have none).
	Cgroup string `json:"cgroup,omitempty"`
	// OutputDisk: the job's output is (or was, until it failed) also in
	// files of the output directory, which the next supervisor appends to
	// and reads back.
	OutputDisk bool `json:"outputDisk,omitempty"`
	// Service is set for jobs spawned with a restart policy.
	Service *Service `json:"service,omitempty"`
	// PendingEnd is why a job in state exiting (or starting) was being
	// ended when the record was taken (a kill in its grace period:
	// manual-cancel, stopped, a timeout...; for a service, what ends its
	// supervision if anything does): after a crash the job ends with it,
	// not with supervisor-restart, and a service being stopped or killed
	// is not resumed.
	PendingEnd protocol.Reason `json:"pendingEnd,omitempty"`
	// LeaderExit is how a one-shot job's leader process ended while the
	// rest of its group was still being terminated when the record was
	// taken: after a crash the job ends with it (reason exit or signal,
	// as it would have), not with supervisor-restart.
	LeaderExit *LeaderExit `json:"leaderExit,omitempty"`
	// OutputSkips are a one-shot job's output offset ranges below
	// OutputEnd that never held output, oldest first: a job the
	// supervisor's crash interrupted ends past every offset the dead
	// supervisor may have published. (A service's are in Service.)
	OutputSkips []OffsetRange `json:"outputSkips,omitempty"`
}

// Service is what a service job needs to go on after a supervisor
// restart: its whole spec (the file is 0600: env may hold secrets), its
// run count, backoff state and run history.
type Service struct {
	Spec     protocol.SpawnArgs `json:"spec"`
	Attempt  int                `json:"attempt"`
	Restarts int                `json:"restarts"`
	// Consecutive restarts since the last reset, and the run ends (ms
	// since the Unix epoch) still inside the restart window.
	Consecutive int                  `json:"consecutive"`
	Ends        []int64              `json:"ends,omitempty"`
	History     []protocol.RunRecord `json:"history,omitempty"`
	// RunOutputStart is the output offset at which the current run's
	// output began (its share of OutputTail, for its history record).
	RunOutputStart int64 `json:"runOutputStart,omitempty"`
	// OutputSkips are the output offset ranges below OutputEnd that
	// never held output, oldest first: a service resumed after a crash
	// writes past every offset the dead supervisor may have published.
	OutputSkips []OffsetRange `json:"outputSkips,omitempty"`
}

// LeaderExit is how a job's leader process ended: its exit code, or the
// signal that killed it (a name, as on the wire).
type LeaderExit struct {
	ExitCode *int   `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
}

// TailChunk is one output event within a record's OutputTail.
type TailChunk struct {
	Seq    uint64          `json:"seq"`
	Stream protocol.Stream `json:"stream"`
	Len    int             `json:"len"`
	// Attempt is the service run that printed it (absent, 0: a one-shot
	// job's).
	Attempt int `json:"attempt,omitempty"`
}

// Unpublished is output of one stream in a record's OutputUnpublished.
type Unpublished struct {
	Stream protocol.Stream `json:"stream"`
	Data   []byte          `json:"data"`
	// Attempt is the service run that printed it (absent, 0: a one-shot
	// job's).
	Attempt int `json:"attempt,omitempty"`
}

// OffsetRange is the output offsets [At, At+N). JSON has it as the pair
// [at, n].
type OffsetRange struct{ At, N int64 }

// MarshalJSON writes r as [at, n].
func (r OffsetRange) MarshalJSON() ([]byte, error) {
	b := append(strconv.AppendInt([]byte{'['}, r.At, 10), ',')
	return append(strconv.AppendInt(b, r.N, 10), ']'), nil
}

// UnmarshalJSON reads [at, n] (as a [2]int64 would be read: missing
// elements are 0, extra ones ignored).
func (r *OffsetRange) UnmarshalJSON(b []byte) error {
	var p [2]int64
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	r.At, r.N = p[0], p[1]
	return nil
}

// Member identifies one process of a job's group.
type Member struct {
	Pid        int    `json:"pid"`
	StartTicks uint64 `json:"startTicks"`
}

// Finished reports whether the record's job had ended.
func (r *Record) Finished() bool { return r.State == protocol.StateExited }

// TailEnd is the offset just past OutputTail: OutputTailEnd, or
// OutputEnd when that is absent.
func (r *Record) TailEnd() int64 {
	if r.OutputTailEnd != 0 {
		return r.OutputTailEnd
	}
	return r.OutputEnd
}

// checkRecord says why r cannot be used ("": it can).
func checkRecord(r *Record) string {
	switch {
	case r.JobID == "":
		return "a record has no jobId"
	case r.Pid < 0 || r.Pgid < 0:
		return fmt.Sprintf("job %.128q has a negative pid", r.JobID)
	}
	switch r.State {
	case protocol.StateQueued, protocol.StateStarting, protocol.StateRunning, protocol.StateExiting, protocol.StateRestarting, protocol.StateExited:
		return ""
	}
	return fmt.Sprintf("job %.128q has unknown state %.32q", r.JobID, r.State)
}
