package outlog

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// record is what a job's info.json holds: its JobInfo (the fields at
// the top level, as the first format had them alone) and, once it ended
// (Writer.Finish), its terminal event as published. Supervisors before
// the terminal event was recorded wrote the JobInfo only; an earlier
// supervisor reading a newer record ignores the field.
type record struct {
	protocol.JobInfo
	Terminal *terminalRecord `json:"terminal,omitempty"`
}

// terminalRecord is a job's terminal event (job.exited or job.failed)
// as published: seq, time, kind, service run and payload.
type terminalRecord struct {
	Seq     uint64               `json:"seq"`
	Ts      int64                `json:"ts"`
	Kind    protocol.Kind        `json:"kind"`
	Attempt int                  `json:"attempt,omitempty"`
	Payload protocol.ExitPayload `json:"payload"`
}

// newRecord returns the record of info, with its terminal event ev if
// it is one.
func newRecord(info protocol.JobInfo, ev *protocol.Event) *record {
	r := &record{JobInfo: info}
	if ev == nil || !ev.Kind.Terminal() {
		return r
	}
	var p protocol.ExitPayload
	if ev.DecodePayload(&p) == nil {
		r.Terminal = &terminalRecord{Seq: ev.Seq, Ts: ev.Ts, Kind: ev.Kind, Attempt: ev.Attempt, Payload: p}
	}
	return r
}

// unknownEnd is the error of a job whose end its files do not record.
const unknownEnd = "not known to this supervisor: output read from its files, without a record of how the job ended"

// readInfo returns the job's info as recorded when it ended, with its
// terminal event as recorded (nil: none, from a supervisor before it
// was recorded), or what can be said without that record: the job as
// recorded at its spawn (its name, command and creation time), or its
// id only, ended (reason supervisor-restart: its supervisor went away
// before it recorded the end).
func readInfo(dir, id string) (protocol.JobInfo, *terminalRecord) {
	rec, ok := recordedInfo(dir, id)
	if ok && rec.State == protocol.StateExited {
		t := rec.Terminal
		if t != nil && (!t.Kind.Terminal() || t.Seq == 0) {
			t = nil // (the file is input)
		}
		return rec.JobInfo, t
	}
	return protocol.JobInfo{JobID: id, Name: rec.Name, Argv: rec.Argv, Shell: rec.Shell, Cwd: rec.Cwd, Labels: rec.Labels,
		SessionID: rec.SessionID, CreatedAt: rec.CreatedAt, Restart: rec.Restart, State: protocol.StateExited,
		Reason: protocol.ReasonSupervisorRestart, Error: unknownEnd}, nil
}

// recordedInfo returns the job's record in its directory (false: none,
// or not the job's).
func recordedInfo(dir, id string) (record, bool) {
	var rec record
	f, err := openNoFollow(filepath.Join(dir, infoFile), os.O_RDONLY, 0)
	if err != nil {
		return rec, false
	}
	data, rerr := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	if rerr != nil || json.Unmarshal(data, &rec) != nil || rec.JobID != id {
		return record{}, false
	}
	rec.Usage = nil
	if rec.Name != "" && protocol.ValidJobName(rec.Name) != nil {
		rec.Name = "" // (the file is input: a name is looked up by)
	}
	return rec, true
}

// terminalEvent returns the terminal event of a job no longer in memory
// whose last output event in its files is lastSeq (at time lastTs): as
// recorded, or made from its record (numbered after its recorded last
// seq, or after lastSeq: a record of an earlier supervisor or of its
// spawn does not number it), its output ending at end.
func terminalEvent(info protocol.JobInfo, t *terminalRecord, lastSeq uint64, lastTs, end int64) protocol.Event {
	if t == nil {
		p := protocol.ExitPayload{Reason: info.Reason, ExitCode: info.ExitCode, Signal: info.Signal, Error: info.Error,
			OutputEnd: end, StdoutBytes: info.StdoutBytes, StderrBytes: info.StderrBytes, EndedAt: info.EndedAt, LastOutputAt: info.LastOutputAt}
		if info.StartedAt > 0 && info.EndedAt > info.StartedAt {
			p.DurationMs = info.EndedAt - info.StartedAt
		}
		kind := protocol.KindFailed
		if info.Reason == protocol.ReasonExit {
			kind = protocol.KindExited
		}
		t = &terminalRecord{Seq: max(info.LastSeq, lastSeq) + 1, Ts: max(info.EndedAt, lastTs), Kind: kind, Attempt: info.Attempt, Payload: p}
	} else if t.Seq <= lastSeq {
		c := *t // (the file is input: never before the output)
		c.Seq = lastSeq + 1
		t = &c
	}
	p := t.Payload
	// (the file is input: an error of valid UTF-8, the end of the output
	// not before what the files hold)
	p.Error, p.OutputEnd = strings.ToValidUTF8(p.Error, "\uFFFD"), max(p.OutputEnd, end)
	ev, _ := protocol.NewEvent(info.JobID, t.Seq, t.Ts, t.Kind, p)
	ev.Attempt = max(t.Attempt, 0)
	return ev
}
