package protocol

import (
	"errors"
	"fmt"
)

// Version is the protocol version this package speaks. Requests carry it in
// their "v" field; a server rejects any other version with CodeUnsupportedVersion.
const Version = 2

// Op names a control-plane operation.
type Op string

// Control-plane operations.
const (
	OpSpawn     Op = "spawn"
	OpPoll      Op = "poll"
	OpKill      Op = "kill"
	OpStatus    Op = "status"
	OpHealth    Op = "health"
	OpListJobs  Op = "list-jobs"
	OpRemove    Op = "remove"
	OpSubscribe Op = "subscribe"
	OpWrite     Op = "write"
	OpResize    Op = "resize"
	// OpStart, OpRestart and OpStop control service jobs (see RestartPolicy).
	OpStart   Op = "start"
	OpRestart Op = "restart"
	OpStop    Op = "stop"
	// OpHistory returns a job's ended runs with their last output lines.
	OpHistory Op = "history"
	// OpWait replies when a job has finished, or when its waitMs passed.
	OpWait Op = "wait"
	// OpCancel gives up a reply held for a wait (spawn with waitMs, or
	// wait) that the same connection asked for: the held request is never
	// answered.
	OpCancel Op = "cancel"
	// OpPace paces a job's output by the asking connection: its output
	// is read no further than a window past what the connection says it
	// has taken, as a pipe's writer waits for its reader.
	OpPace Op = "pace"
)

// Ops lists every operation the server understands, in documentation order.
var Ops = []Op{OpSpawn, OpPoll, OpKill, OpStatus, OpHealth, OpListJobs, OpRemove, OpSubscribe, OpWrite, OpResize, OpStart, OpRestart, OpStop, OpHistory, OpWait, OpCancel, OpPace}

// Known reports whether op is an operation of this protocol version.
func (op Op) Known() bool {
	for _, o := range Ops {
		if o == op {
			return true
		}
	}
	return false
}

// Kind names an event on the event plane.
type Kind string

// Event kinds.
const (
	KindStarted Kind = "job.started"
	KindStdout  Kind = "job.stdout"
	KindStderr  Kind = "job.stderr"
	KindExited  Kind = "job.exited"
	KindFailed  Kind = "job.failed"
	KindGap     Kind = "job.gap"
	// KindOwnershipEscape: processes of the job left its process group or
	// session (payload OwnershipEscapePayload). Part of the job's sequence.
	KindOwnershipEscape Kind = "job.ownership-escape"
	KindHeartbeat       Kind = "supervisor.heartbeat"
	// KindRestarting: a run of a service job ended; the next run starts
	// after a delay (payload RestartingPayload). Not terminal.
	KindRestarting Kind = "job.restarting"
	// KindReady: a notify job sent READY=1 (payload ReadyPayload).
	KindReady Kind = "job.ready"
)

// Terminal reports whether k ends a job's event stream.
func (k Kind) Terminal() bool { return k == KindExited || k == KindFailed }

// Stream names an output stream of a job.
type Stream string

// Output streams.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Kind returns the event kind that carries output of stream s.
func (s Stream) Kind() Kind {
	if s == Stderr {
		return KindStderr
	}
	return KindStdout
}

// State is a job's lifecycle state as seen on the wire.
type State string

// Job states: starting -> running -> exiting -> exited. A job whose spawn
// failed goes straight from starting to exited.
const (
	StateStarting State = "starting"
	StateRunning  State = "running"
	StateExiting  State = "exiting"
	StateExited   State = "exited"
	// StateRestarting: a service job between runs, waiting for its
	// restart delay.
	StateRestarting State = "restarting"
	// StateQueued: a job spawned with Queue waiting for a free slot
	// under the job limit (no process yet); it moves to starting, or to
	// exited when killed first.
	StateQueued State = "queued"
)

// Reason is the normalized termination reason of a finished job.
type Reason string

// Termination reasons. Exactly one is recorded per finished job.
const (
	// ReasonExit: the process exited on its own; see ExitCode.
	ReasonExit Reason = "exit"
	// ReasonSignal: the process was killed by a signal nobody in the
	// supervisor asked for (or by a signal sent with kill --signal).
	ReasonSignal Reason = "signal"
	// ReasonManualCancel: a client asked for the job to be killed.
	ReasonManualCancel Reason = "manual-cancel"
	// ReasonOverallTimeout: the job ran longer than its timeout.
	ReasonOverallTimeout Reason = "overall-timeout"
	// ReasonNoOutputTimeout: the job printed nothing for its no-output timeout.
	ReasonNoOutputTimeout Reason = "no-output-timeout"
	// ReasonSpawnError: the process could not be started.
	ReasonSpawnError Reason = "spawn-error"
	// ReasonSupervisorRestart: the supervisor that owned the job went away.
	ReasonSupervisorRestart Reason = "supervisor-restart"
	// ReasonShutdown: the supervisor terminated the job while shutting down.
	ReasonShutdown Reason = "supervisor-shutdown"
	// ReasonOwnershipEscape: the job was spawned with strictOwnership and
	// one of its processes left its process group or session.
	ReasonOwnershipEscape Reason = "ownership-escape"
	// ReasonRestartLimit: a service job failed maxRestarts times within
	// its restart window; it stays down until started again.
	ReasonRestartLimit Reason = "restart-limit"
	// ReasonWatchdog: a notify job missed its watchdog interval and was
	// killed as hung.
	ReasonWatchdog Reason = "watchdog"
	// ReasonStopped: the job was stopped with the stop op (graceful; a
	// service is not restarted).
	ReasonStopped Reason = "stopped"
	// ReasonManualRestart: a run ended because of the restart op (only in
	// run history and job.restarting; the job goes on).
	ReasonManualRestart Reason = "manual-restart"
)

// Code is a stable, machine-readable error code carried in error replies.
type Code string

// Error codes. Their meaning never changes; new codes may be added.
const (
	CodeBadRequest         Code = "bad-request"
	CodeUnsupportedVersion Code = "unsupported-version"
	CodeUnknownOp          Code = "unknown-op"
	CodeInvalidArgument    Code = "invalid-argument"
	CodeTooLarge           Code = "too-large"
	CodeNotFound           Code = "not-found"
	CodeTooManyJobs        Code = "too-many-jobs"
	CodeSpawnError         Code = "spawn-error"
	// CodeAlreadyExists: a spawn named a job id the supervisor knows.
	CodeAlreadyExists Code = "already-exists"
	// CodeNameTaken: a spawn (or the start of a service) named a job
	// with a name that a job not finished holds; Details["jobId"] is
	// that job.
	CodeNameTaken    Code = "name-taken"
	CodeJobRunning   Code = "job-running"
	CodeShuttingDown Code = "shutting-down"
	CodeTooManyWaits Code = "too-many-waits"
	CodeCancelled    Code = "cancelled"
	CodeInternal     Code = "internal"
)

// Limits of the protocol. A server may be configured with a smaller
// MaxRequestBytes; it never accepts more than these.
const (
	// MaxRequestBytes is the default and hard upper bound of one request body.
	MaxRequestBytes = 1 << 20
	// MaxArgs is the maximum number of argv elements.
	MaxArgs = 4096
	// MaxArgBytes is the maximum total size of argv (or the shell string).
	MaxArgBytes = 256 << 10
	// MaxReplyBytes is the largest reply the supervisor sends: a larger
	// one is refused with too-large.
	MaxReplyBytes = 64 << 20
	// MaxEnv is the maximum number of environment entries.
	MaxEnv = 4096
	// MaxEnvBytes is the maximum total size of environment keys and values.
	MaxEnvBytes = 256 << 10
	// MaxLabels is the maximum number of labels on a job.
	MaxLabels = 64
	// MaxLabelBytes is the maximum size of one label key or value.
	MaxLabelBytes = 256
	// MaxTermSize bounds a terminal's rows and columns (spawn's pty,
	// resize).
	MaxTermSize = 10000
	// MaxIDBytes is the maximum size of a request id, job id or session id.
	MaxIDBytes = 128
	// MaxTimeoutMs is the largest timeout accepted (7 days).
	MaxTimeoutMs = 7 * 24 * 3600 * 1000
	// MaxWaitMs is the longest a wait (op wait, spawn's waitMs) may last.
	MaxWaitMs = 3600 * 1000
	// DefaultWaitMs is a wait op's waitMs when it gives none.
	DefaultWaitMs = 60 * 1000
	// MaxWriteBytes is the most data one write request carries.
	MaxWriteBytes = 256 << 10
	// MaxPollBytes is the most output one poll reply carries.
	MaxPollBytes = 4 << 20
	// MaxSubscribeEvents is the most events one subscribe reply carries.
	MaxSubscribeEvents = 10000
	// MaxSubscribeBytes is about the most output one subscribe reply
	// carries (at least one event is always returned).
	MaxSubscribeBytes = 4 << 20
	// MaxListBytes is about the most one list-jobs reply carries (at
	// least one job is always returned when any is left; More says when
	// more follow).
	MaxListBytes = 16 << 20
)

// Error is an error with a stable code, as carried in a reply.
type Error struct {
	Code    Code              `msgpack:"code" json:"code"`
	Message string            `msgpack:"message" json:"message"`
	Details map[string]string `msgpack:"details,omitempty" json:"details,omitempty"`
	// cause is what the error was made from on this side (see Wrap); it
	// never goes on the wire.
	cause error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap returns the error this one was made from with Wrap (nil for one
// decoded from the wire, or made with Errorf).
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is an *Error of the same code, so that callers
// decide by code, never by message text:
// errors.Is(err, &protocol.Error{Code: protocol.CodeNotFound}), or one of
// the Err sentinels below.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels to test an error's code with errors.Is (compared by code only).
var (
	ErrNotFound     = &Error{Code: CodeNotFound}
	ErrTooManyJobs  = &Error{Code: CodeTooManyJobs}
	ErrSpawnError   = &Error{Code: CodeSpawnError}
	ErrShuttingDown = &Error{Code: CodeShuttingDown}
	ErrJobRunning   = &Error{Code: CodeJobRunning}
	ErrTooLarge     = &Error{Code: CodeTooLarge}
	ErrNameTaken    = &Error{Code: CodeNameTaken}
)

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code and err's message that wraps err.
func Wrap(code Code, err error) *Error {
	return &Error{Code: code, Message: err.Error(), cause: err}
}

// CodeOf returns the code of the first *Error in err's chain, or
// CodeInternal when there is none.
func CodeOf(err error) Code {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeInternal
}
