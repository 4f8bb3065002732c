package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonEvent is an event as --json prints it: the wire's field names, the
// payload decoded to its fields (binary data, as output, in base64 as JSON
// has it).
type jsonEvent struct {
	JobID   string        `json:"jobId"`
	Seq     uint64        `json:"seq"`
	Ts      int64         `json:"ts"`
	Kind    protocol.Kind `json:"kind"`
	Attempt int           `json:"attempt,omitempty"`
	Payload any           `json:"payload,omitempty"`
	Host    string        `json:"host,omitempty"` // (with several supervisors)
}

func eventJSON(ev protocol.Event) jsonEvent {
	out := jsonEvent{JobID: ev.JobID, Seq: ev.Seq, Ts: ev.Ts, Kind: ev.Kind, Attempt: ev.Attempt}
	if len(ev.Payload) > 0 {
		var p map[string]any
		if ev.DecodePayload(&p) == nil {
			out.Payload = p
		}
	}
	return out
}

// gapNotice tells, on stderr, which of a job's events a follower did not
// get (their output is lost).
func gapNotice(g *globals, id string, ev protocol.Event) {
	if !lostOutput(ev) {
		return // (events other than output: nothing lost to say)
	}
	var p protocol.GapPayload
	_ = ev.DecodePayload(&p)
	if p.Bytes > 0 {
		fmt.Fprintf(g.stderr, "execctl: [%s of %s's output lost: events %d..%d are no longer retained (the job printed faster than this follower read, past --ring-buffer)]\n", humanBytes(p.Bytes), id, p.From, p.To)
		return
	}
	fmt.Fprintf(g.stderr, "execctl: [events %d..%d of %s are missing (no longer retained, or not recorded before a supervisor crash): any output in them is lost]\n", p.From, p.To, id)
}

// lostOutput reports whether ev is a gap that may have cost output: not
// one whose events the supervisor knows carried none (job.started,
// job.ready, ...).
func lostOutput(ev protocol.Event) bool {
	if ev.Kind != protocol.KindGap {
		return false
	}
	var p protocol.GapPayload
	return ev.DecodePayload(&p) != nil || !p.NoOutput
}

// lostExit is the exit code of a follow that ended with code but could
// not show all of the output: code, unless it says success.
func lostExit(g *globals, code int, lost bool) int {
	if code != exitOK || !lost {
		return code
	}
	return outputLost(g, "the job succeeded, but part of its output was lost")
}

// logsLostExit is logs -f's exit code: 5 when output was lost, whatever
// the jobs' ends (it does not report those).
func logsLostExit(g *globals, lost bool) int {
	if !lost {
		return exitOK
	}
	return outputLost(g, "part of the output was lost")
}

// outputLost reports exit code 5 (what says so: see above, or the gap
// events of --json).
func outputLost(g *globals, what string) int {
	if g.json {
		return g.fail(cliError{Code: codeOutputLost, Message: what + " (see the gap events)", ExitCode: exitOutputLost})
	}
	return g.fail(cliError{Code: codeOutputLost, Message: fmt.Sprintf("exit code %d: %s (see above)", exitOutputLost, what), ExitCode: exitOutputLost})
}

// isTTY reports whether w is a terminal.
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(int(f.Fd()))
}
