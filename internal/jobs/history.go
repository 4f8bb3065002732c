package jobs

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// A service's history: a record of each ended run (kept in j.svc.history,
// the last protocol.HistoryRuns), with the last lines it printed.

// History returns the job's ended runs, oldest first.
func (j *Job) History() []protocol.RunRecord {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]protocol.RunRecord, len(j.svc.history))
	copy(out, j.svc.history)
	return out
}

// runRecordLocked describes the run that just ended with reason, with its
// last lines.
func (j *Job) runRecordLocked(reason Reason) protocol.RunRecord {
	rec := protocol.RunRecord{
		Attempt: j.svc.attempt, StartedAt: ms(j.startedAt), EndedAt: ms(j.endedAt), Pid: j.run.pid,
		Reason: reason, ExitCode: j.exitCode, Signal: j.signal, Error: j.errMsg,
		Tail: []string{},
	}
	if !j.startedAt.IsZero() && j.life.State != Starting {
		rec.DurationMs = j.endedAt.Sub(j.startedAt).Milliseconds()
	} else {
		rec.StartedAt, rec.Pid = 0, 0
	}
	rec.Tail = TailLines(j.runOutputLocked(protocol.HistoryTailBytes), protocol.HistoryLines)
	return rec
}

// runOutputLocked returns up to max of the newest retained bytes of the
// current run's output (stdout and stderr interleaved as produced).
func (j *Job) runOutputLocked(max int) []byte {
	live := j.out.ring.live()
	var parts [][]byte
	n := 0
	for i := len(live) - 1; i >= 0 && n < max; i-- {
		c := live[i]
		d := c.Data
		if end := c.Offset + int64(len(d)); end <= j.svc.runOffset {
			break
		}
		if c.Offset < j.svc.runOffset {
			d = d[j.svc.runOffset-c.Offset:]
		}
		if room := max - n; len(d) > room {
			d = d[len(d)-room:]
		}
		parts = append(parts, d)
		n += len(d)
	}
	out := make([]byte, 0, n)
	for i := len(parts) - 1; i >= 0; i-- {
		out = append(out, parts[i]...)
	}
	return out
}

// maxHistoryLine cuts very long lines of a run record.
const maxHistoryLine = 2 << 10

// TailLines splits b into lines and returns the last n (CR LF and LF
// endings; a partial last line counts; invalid UTF-8 is replaced).
func TailLines(b []byte, n int) []string {
	b = bytes.TrimSuffix(b, []byte("\n"))
	if len(b) == 0 {
		return []string{}
	}
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) > maxHistoryLine {
			l = append(l[:maxHistoryLine:maxHistoryLine], "…"...)
		}
		s := string(l)
		if !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		out[i] = s
	}
	return out
}
