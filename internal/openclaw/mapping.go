package openclaw

import (
	"strings"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Seqs: the dialect numbers a job's events from 0 (job.started), the
// native protocol from 1, both with one contiguous counter per job for
// every event of the job (a plain job: started, output, one terminal
// event). So a dialect seq is the native seq - 1, for ever, whichever
// way it is read (poll, subscribe, events). Native-only events (a
// service's job.restarting, job.ready, job.ownership-escape) keep their
// seqs but have no dialect form: those seqs are simply never seen, as
// the dialect's own lifecycle seqs are never seen among poll's chunks.
// After a supervisor crash native seqs jump (see docs/protocol.md);
// dialect seqs jump with them.

// dialectSeq is the dialect seq of native seq n (>= 1).
func dialectSeq(n uint64) int64 { return int64(n) - 1 }

// nativeFrom is the native seq of dialect seq d (a cursor or fromSeq:
// anything below 0 counts as 0), capped where the native protocol stops
// taking seqs (no job gets near it).
func nativeFrom(d int64) uint64 {
	const maxNativeSeq = 1 << 62
	switch {
	case d <= 0:
		return 1
	case d >= maxNativeSeq-1:
		return maxNativeSeq
	}
	return uint64(d) + 1
}

// ending is how the dialect tells a finished job's end: its state
// ("exited", with a job.exited event, or "failed", with job.failed) and
// its reason.
type ending struct {
	state, reason string
}

// endingOf maps a native termination reason (with the signal that ended
// the process, if any) onto the dialect's. The process ending on its own
// or by a signal, a kill included, is "exited" with reason "exit" or
// "signal" (how the process ended, as the Node server tells it); the
// supervisor giving up on it is "failed": a timeout, a spawn error, and
// anything without a dialect reason (a supervisor restart, shutdown,
// ownership escape, watchdog), reported as "spawn-error" as the Node
// server reports the jobs it recovers from its journal.
func endingOf(r protocol.Reason, signal string) ending {
	switch r {
	case protocol.ReasonExit, protocol.ReasonSignal, protocol.ReasonManualCancel, protocol.ReasonStopped:
		if signal != "" {
			return ending{stateExited, reasonSignal}
		}
		return ending{stateExited, reasonExit}
	case protocol.ReasonOverallTimeout:
		return ending{stateFailed, reasonTimeout}
	case protocol.ReasonNoOutputTimeout:
		return ending{stateFailed, reasonNoOutputTimeout}
	}
	return ending{stateFailed, reasonSpawnError}
}

// failedError is job.failed's error: the dialect reason for a timeout
// (as the Node server sends), else what the native reason and error say.
func failedError(r protocol.Reason, msg string) string {
	e := endingOf(r, "")
	switch {
	case e.reason == reasonTimeout || e.reason == reasonNoOutputTimeout:
		return e.reason
	case r == protocol.ReasonSpawnError && msg != "":
		return msg
	case msg != "":
		return string(r) + ": " + msg
	case r == "":
		return reasonSpawnError
	}
	return string(r)
}

// stateOf is the dialect state of a native job.
func stateOf(info *protocol.JobInfo) string {
	switch info.State {
	case protocol.StateStarting, protocol.StateQueued:
		return statePending
	case protocol.StateRunning, protocol.StateRestarting:
		return stateRunning
	case protocol.StateExiting:
		return stateExiting
	}
	return endingOf(info.Reason, info.Signal).state
}

// signalOf is a signal name as the dialect sends it: null for none.
func signalOf(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// commandOf is the command a job runs, as the dialect shows it: the
// command string of a dialect spawn (/bin/bash -c COMMAND), a native
// job's shell string, or its argv joined with spaces.
func commandOf(argv []string, shell string) string {
	if len(argv) == 3 && argv[0] == bashPath && argv[1] == "-c" {
		return argv[2]
	}
	if shell != "" {
		return shell
	}
	return strings.Join(argv, " ")
}

// bashPath runs every dialect command: /bin/bash -c COMMAND.
const bashPath = "/bin/bash"

// statusOf is a native job as status shows it.
func statusOf(info *protocol.JobInfo) jobStatus {
	st := jobStatus{
		JobID: info.JobID, State: stateOf(info), Pid: info.Pid, StartedAtMs: startedAt(info),
		ExitCode: info.ExitCode, ExitSignal: signalOf(info.Signal),
		OutputBytes: info.StdoutBytes + info.StderrBytes,
	}
	if info.State == protocol.StateExited {
		st.TerminationReason = endingOf(info.Reason, info.Signal).reason
	}
	return st
}

// startedAt is when the job started, or was created if it never did.
func startedAt(info *protocol.JobInfo) int64 {
	if info.StartedAt != 0 {
		return info.StartedAt
	}
	return info.CreatedAt
}

// lastSeq is the dialect seq of a job's newest event (-1: none).
func lastSeq(info *protocol.JobInfo) int64 { return int64(info.LastSeq) - 1 }

// translate returns the dialect form of native event ev (text: an
// output event's data, decoded by the caller), or nil when it has none.
// A job.gap (native seq 0) names dialect seqs, and carries the first of
// them as its own seq.
func translate(ev *protocol.Event, text string) any {
	head := eventHead{Kind: string(ev.Kind), JobID: ev.JobID, Seq: dialectSeq(ev.Seq), Ts: ev.Ts}
	switch ev.Kind {
	case protocol.KindStarted:
		var p protocol.StartedPayload
		if ev.DecodePayload(&p) != nil {
			return nil
		}
		return startedEvent{head, p.Pid, commandOf(p.Argv, p.Shell)}
	case protocol.KindStdout, protocol.KindStderr:
		return outputEvent{head, text}
	case protocol.KindExited, protocol.KindFailed:
		var p protocol.ExitPayload
		if ev.DecodePayload(&p) != nil {
			return nil
		}
		e := endingOf(p.Reason, p.Signal)
		if e.state == stateExited {
			head.Kind = string(protocol.KindExited)
			return exitedEvent{head, p.ExitCode, signalOf(p.Signal), e.reason}
		}
		head.Kind = string(protocol.KindFailed)
		return failedEvent{head, failedError(p.Reason, p.Error), e.reason}
	case protocol.KindGap:
		var p protocol.GapPayload
		if ev.DecodePayload(&p) != nil || p.From == 0 {
			return nil
		}
		head.Seq = dialectSeq(p.From)
		return gapEvent{head, p.Count, dialectSeq(p.From), dialectSeq(p.To)}
	}
	return nil
}

// Journaled is how the Node supervisor's journal shows a job not yet
// ended: its dialect state, the dialect seq of its newest event, when it
// started and its command (a supervisor's journal carries it for
// OpenClaw's tools: internal/journal.OpenClawJob).
type Journaled struct {
	State, Command       string
	LastSeq, StartedAtMs int64
}

// JournaledOf is the dialect's view of native job info for the journal.
func JournaledOf(info *protocol.JobInfo) Journaled {
	return Journaled{State: stateOf(info), Command: commandOf(info.Argv, info.Shell), LastSeq: lastSeq(info), StartedAtMs: startedAt(info)}
}
