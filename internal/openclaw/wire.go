package openclaw

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// TopicPrefix starts the topic of every dialect event: "exec:<jobId>".
const TopicPrefix = "exec:"

// Request types of the dialect.
const (
	typeSpawn     = "spawn"
	typePoll      = "poll"
	typeKill      = "kill"
	typeStatus    = "status"
	typeHealth    = "health"
	typeSubscribe = "subscribe"
	typeListJobs  = "list-jobs"
)

// Job states and termination reasons of the dialect.
const (
	statePending = "pending"
	stateRunning = "running"
	stateExiting = "exiting"
	stateExited  = "exited"
	stateFailed  = "failed"

	reasonExit            = "exit"
	reasonSignal          = "signal"
	reasonTimeout         = "timeout"
	reasonNoOutputTimeout = "no-output-timeout"
	reasonSpawnError      = "spawn-error"
)

// Error texts of the dialect that its clients (and tests) look for.
const (
	errNotFound      = "Job not found"
	errAlreadyExists = "Job already exists"
	errTooManyJobs   = "Max concurrent jobs reached"
)

// request is every field of every request type; each op reads its own.
// Optional numbers are pointers: absent (or null) is not 0.
type request struct {
	Type              string            `json:"type"`
	JobID             string            `json:"jobId"`
	Command           string            `json:"command"`
	Cwd               string            `json:"cwd"`
	Env               map[string]string `json:"env"`
	TimeoutMs         *jsonInt          `json:"timeoutMs"`
	NoOutputTimeoutMs *jsonInt          `json:"noOutputTimeoutMs"`
	Cursor            *jsonInt          `json:"cursor"`
	Signal            string            `json:"signal"`
	FromSeq           *jsonInt          `json:"fromSeq"`
	// Accepted and ignored, as by the Node server, whatever they hold.
	UsePty         json.RawMessage `json:"usePty"`
	MaxOutputBytes json.RawMessage `json:"maxOutputBytes"`
}

// jsonInt is a JSON number that must be an integer (1e3 and 5.0 are;
// 1.5 is not), within what a JavaScript number holds exactly.
type jsonInt int64

const maxSafeInt = 1<<53 - 1

func (n *jsonInt) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // (absent: the pointer stays nil)
	}
	if i, err := strconv.ParseInt(string(b), 10, 64); err == nil && i >= -maxSafeInt && i <= maxSafeInt {
		*n = jsonInt(i)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > maxSafeInt {
		return fmt.Errorf("%.32s is not an integer of at most 2^53-1", b)
	}
	*n = jsonInt(f)
	return nil
}

// value returns n, or def when it is absent.
func (n *jsonInt) value(def int64) int64 {
	if n == nil {
		return def
	}
	return int64(*n)
}

// Replies. Field order follows the Node server's. exitCode and
// exitSignal are `any`: nil leaves them out, a nil *int or *string
// sends an explicit null.

type errorReply struct {
	Type    string `json:"type"`
	Success bool   `json:"success"`
	JobID   string `json:"jobId,omitempty"`
	Error   string `json:"error"`
}

// badRequestReply answers what cannot be handled as any type (malformed
// JSON, an unknown type): typed "health", as the Node server does.
type badRequestReply struct {
	Type               string `json:"type"`
	Success            bool   `json:"success"`
	Uptime             int64  `json:"uptime"`
	ActiveJobs         int    `json:"activeJobs"`
	TotalJobsProcessed int    `json:"totalJobsProcessed"`
	MemoryUsageMB      int64  `json:"memoryUsageMB"`
	Error              string `json:"error"`
}

type spawnReply struct {
	Type    string `json:"type"`
	Success bool   `json:"success"`
	JobID   string `json:"jobId"`
	Pid     int    `json:"pid"`
}

type chunk struct {
	Seq  int64  `json:"seq"`
	Ts   int64  `json:"ts"`
	Kind string `json:"kind"`
	Data string `json:"data"`
}

type pollReply struct {
	Type              string  `json:"type"`
	Success           bool    `json:"success"`
	JobID             string  `json:"jobId"`
	State             string  `json:"state"`
	Chunks            []chunk `json:"chunks"`
	Cursor            int64   `json:"cursor"`
	ExitCode          any     `json:"exitCode,omitempty"`
	ExitSignal        any     `json:"exitSignal,omitempty"`
	TerminationReason string  `json:"terminationReason,omitempty"`
	Error             string  `json:"error,omitempty"`
}

type killReply struct {
	Type    string `json:"type"`
	Success bool   `json:"success"`
	JobID   string `json:"jobId"`
}

type jobStatus struct {
	JobID             string  `json:"jobId"`
	State             string  `json:"state"`
	Pid               int     `json:"pid,omitempty"`
	StartedAtMs       int64   `json:"startedAtMs"`
	ExitCode          *int    `json:"exitCode"`
	ExitSignal        *string `json:"exitSignal"`
	TerminationReason string  `json:"terminationReason,omitempty"`
	OutputBytes       int64   `json:"outputBytes"`
}

type statusReply struct {
	Type    string     `json:"type"`
	Success bool       `json:"success"`
	Job     *jobStatus `json:"job"`
}

type statusAllReply struct {
	Type    string      `json:"type"`
	Success bool        `json:"success"`
	Jobs    []jobStatus `json:"jobs"`
}

type healthReply struct {
	Type               string `json:"type"`
	Success            bool   `json:"success"`
	Uptime             int64  `json:"uptime"`
	ActiveJobs         int    `json:"activeJobs"`
	TotalJobsProcessed int    `json:"totalJobsProcessed"`
	MemoryUsageMB      int64  `json:"memoryUsageMB"`
	EventsDropped      uint64 `json:"eventsDropped"`
	Error              string `json:"error,omitempty"`
}

type subscribeReply struct {
	Type       string `json:"type"`
	Success    bool   `json:"success"`
	JobID      string `json:"jobId"`
	CurrentSeq int64  `json:"currentSeq"`
	Events     []any  `json:"events"`
}

type listedJob struct {
	JobID       string `json:"jobId"`
	State       string `json:"state"`
	LastSeq     int64  `json:"lastSeq"`
	StartedAtMs int64  `json:"startedAtMs"`
}

type listJobsReply struct {
	Type    string      `json:"type"`
	Success bool        `json:"success"`
	Jobs    []listedJob `json:"jobs"`
}

// Events, flat: {kind, jobId, seq, ts, ...}.

type eventHead struct {
	Kind  string `json:"kind"`
	JobID string `json:"jobId"`
	Seq   int64  `json:"seq"`
	Ts    int64  `json:"ts"`
}

type startedEvent struct {
	eventHead
	Pid     int    `json:"pid"`
	Command string `json:"command"`
}

type outputEvent struct {
	eventHead
	Data string `json:"data"`
}

type exitedEvent struct {
	eventHead
	ExitCode   *int    `json:"exitCode"`
	ExitSignal *string `json:"exitSignal"`
	Reason     string  `json:"reason"`
}

type failedEvent struct {
	eventHead
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

type gapEvent struct {
	eventHead
	DroppedCount uint64 `json:"droppedCount"`
	FromSeq      int64  `json:"fromSeq"`
	ToSeq        int64  `json:"toSeq"`
}

// marshal encodes v as compact JSON, without escaping <, > and & (job
// output is not HTML). Every value passed is one of the types above,
// which always encode.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("openclaw: encode %T: %v", v, err)) // (a bug: Handle answers it)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
