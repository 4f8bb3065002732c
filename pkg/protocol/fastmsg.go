package protocol

import (
	"maps"
	"math"
	"slices"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// Hand-written msgpack encoders and decoders for the messages of a spawn
// (its request, its reply, its started and exit events), the supervisor's
// busiest path. Each encoder writes what Marshal writes for the same value
// (map keys sorted where Marshal's order is the map's); each decoder
// yields what the generic decoder yields, or reports that it cannot and
// the caller falls back to the generic path (nested structures, unusual
// encodings). TestFastMessagesMatchGeneric and FuzzFastDecodeMatchesGeneric
// hold them to that, field by field, by reflection over the structs.

// mw appends a msgpack map whose entry count is set by end.
type mw struct {
	b     []byte
	start int
	n     int
}

func newMW(b []byte) mw { return mw{b: append(b, 0xde, 0, 0), start: len(b)} }

func (w *mw) key(k string) {
	w.b = appendStr(w.b, k)
	w.n++
}

func (w *mw) str(k, v string, omitEmpty bool) {
	if omitEmpty && v == "" {
		return
	}
	w.key(k)
	w.b = appendStr(w.b, v)
}

func (w *mw) int(k string, v int64, omitEmpty bool) {
	if omitEmpty && v == 0 {
		return
	}
	w.key(k)
	w.b = appendInt(w.b, v)
}

func (w *mw) bool(k string, v bool, omitEmpty bool) {
	if omitEmpty && !v {
		return
	}
	w.key(k)
	if v {
		w.b = append(w.b, 0xc3)
	} else {
		w.b = append(w.b, 0xc2)
	}
}

// strs writes a []string field (omitted when empty if omitEmpty).
func (w *mw) strs(k string, v []string, omitEmpty bool) {
	if omitEmpty && len(v) == 0 {
		return
	}
	w.key(k)
	if v == nil {
		w.b = append(w.b, 0xc0)
		return
	}
	w.b = appendArrayLen(w.b, len(v))
	for _, s := range v {
		w.b = appendStr(w.b, s)
	}
}

// strMap writes a map[string]string field, keys sorted.
func (w *mw) strMap(k string, v map[string]string, omitEmpty bool) {
	if omitEmpty && len(v) == 0 {
		return
	}
	w.key(k)
	if v == nil {
		w.b = append(w.b, 0xc0)
		return
	}
	w.b = appendMapLen(w.b, len(v))
	if len(v) == 1 {
		for key, val := range v {
			w.b = appendStr(appendStr(w.b, key), val)
		}
		return
	}
	for _, key := range slices.Sorted(maps.Keys(v)) {
		w.b = appendStr(appendStr(w.b, key), v[key])
	}
}

// raw writes an already encoded value (a RawMessage field; omitted when
// empty if omitEmpty, nil otherwise).
func (w *mw) raw(k string, v []byte, omitEmpty bool) {
	if omitEmpty && len(v) == 0 {
		return
	}
	w.key(k)
	if len(v) == 0 {
		w.b = append(w.b, 0xc0)
		return
	}
	w.b = append(w.b, v...)
}

// command writes the fields describing a job's command, in the order
// JobInfo and StartedPayload both declare them (all omitted when empty).
func (w *mw) command(argv []string, shell, cwd string, labels map[string]string, session string) {
	w.strs("argv", argv, true)
	w.str("shell", shell, true)
	w.str("cwd", cwd, true)
	w.strMap("labels", labels, true)
	w.str("sessionId", session, true)
}

// end sets the entry count (a fixmap's one-byte header when it fits, as
// Marshal writes it) and returns the buffer.
func (w *mw) end() []byte {
	if w.n < 16 {
		w.b[w.start] = 0x80 | byte(w.n)
		copy(w.b[w.start+1:], w.b[w.start+3:])
		return w.b[:len(w.b)-2]
	}
	w.b[w.start+1], w.b[w.start+2] = byte(w.n>>8), byte(w.n)
	return w.b
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= 0xffff:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= 0xffff:
		return append(b, 0xde, byte(n>>8), byte(n))
	}
	return append(b, 0xdf, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// appendSpawnArgs encodes a; it reports false for what it leaves to
// Marshal (pty, restart or limits set).
func appendSpawnArgs(b []byte, a *SpawnArgs) ([]byte, bool) {
	if a.Pty != nil || a.Restart != nil || a.Limits != nil {
		return b, false
	}
	w := newMW(b)
	w.str("jobId", a.JobID, true)
	w.str("name", a.Name, true)
	w.strs("argv", a.Argv, true)
	w.str("shell", a.Shell, true)
	w.str("cwd", a.Cwd, true)
	w.strMap("env", a.Env, true)
	w.str("envMode", a.EnvMode, true)
	w.int("timeoutMs", a.TimeoutMs, true)
	w.int("noOutputTimeoutMs", a.NoOutputTimeoutMs, true)
	w.int("graceMs", a.GraceMs, true)
	w.strMap("labels", a.Labels, true)
	w.str("sessionId", a.SessionID, true)
	w.bool("stdin", a.Stdin, true)
	w.bool("strictOwnership", a.StrictOwnership, true)
	w.bool("notify", a.Notify, true)
	w.int("watchdogIntervalMs", a.WatchdogIntervalMs, true)
	w.int("waitMs", a.WaitMs, true)
	w.bool("pace", a.Pace, true)
	w.bool("queue", a.Queue, true)
	w.str("output", a.Output, true)
	return w.end(), true
}

// appendJobInfo encodes i; it reports false for what it leaves to Marshal
// (limits set).
func appendJobInfo(b []byte, i *JobInfo) ([]byte, bool) {
	if i.Limits != nil {
		return b, false
	}
	w := newMW(b)
	w.str("jobId", i.JobID, false)
	w.str("name", i.Name, true)
	w.str("state", string(i.State), false)
	w.command(i.Argv, i.Shell, i.Cwd, i.Labels, i.SessionID)
	w.int("pid", int64(i.Pid), false)
	w.int("pgid", int64(i.Pgid), false)
	w.int("createdAt", i.CreatedAt, false)
	w.int("startedAt", i.StartedAt, false)
	w.int("endedAt", i.EndedAt, false)
	w.int("lastOutputAt", i.LastOutputAt, false)
	w.str("reason", string(i.Reason), true)
	if i.ExitCode != nil {
		w.int("exitCode", int64(*i.ExitCode), false)
	}
	w.str("signal", i.Signal, true)
	w.str("error", i.Error, true)
	w.int("timeoutMs", i.TimeoutMs, false)
	w.int("noOutputTimeoutMs", i.NoOutputTimeoutMs, false)
	w.int("stdoutBytes", i.StdoutBytes, false)
	w.int("stderrBytes", i.StderrBytes, false)
	w.int("retainedFrom", i.RetainedFrom, false)
	w.int("outputEnd", i.OutputEnd, false)
	w.key("lastSeq")
	w.b = appendUint(w.b, i.LastSeq)
	w.bool("pty", i.Pty, true)
	w.int("rows", int64(i.Rows), true)
	w.int("cols", int64(i.Cols), true)
	w.bool("bracketedPaste", i.BracketedPaste, true)
	w.bool("stdinOpen", i.StdinOpen, true)
	w.bool("outputHeld", i.OutputHeld, true)
	w.bool("outputPaced", i.OutputPaced, true)
	w.bool("outputDisk", i.OutputDisk, true)
	w.str("outputDiskError", i.OutputDiskError, true)
	w.str("ownership", i.Ownership, true)
	w.str("cgroup", i.Cgroup, true)
	if i.Usage != nil {
		w.key("usage")
		w.b = appendUsage(w.b, i.Usage)
	}
	w.str("restart", i.Restart, true)
	w.int("attempt", int64(i.Attempt), true)
	w.int("restarts", int64(i.Restarts), true)
	w.int("restartsInWindow", int64(i.RestartsInWindow), true)
	w.int("nextRestartAt", i.NextRestartAt, true)
	w.int("uptimeMs", i.UptimeMs, true)
	w.bool("notify", i.Notify, true)
	w.bool("ready", i.Ready, true)
	w.str("notifyStatus", i.NotifyStatus, true)
	w.int("lastWatchdogAt", i.LastWatchdogAt, true)
	w.bool("stopping", i.Stopping, true)
	return w.end(), true
}

func appendStartedPayload(b []byte, p *StartedPayload) []byte {
	w := newMW(b)
	w.int("pid", int64(p.Pid), false)
	w.int("pgid", int64(p.Pgid), false)
	w.command(p.Argv, p.Shell, p.Cwd, p.Labels, p.SessionID)
	w.int("attempt", int64(p.Attempt), true)
	return w.end()
}

func appendExitPayload(b []byte, p *ExitPayload) []byte {
	w := newMW(b)
	w.str("reason", string(p.Reason), false)
	if p.ExitCode != nil {
		w.int("exitCode", int64(*p.ExitCode), false)
	}
	w.str("signal", p.Signal, true)
	w.str("error", p.Error, true)
	w.int("durationMs", p.DurationMs, false)
	w.int("outputEnd", p.OutputEnd, false)
	w.int("stdoutBytes", p.StdoutBytes, true)
	w.int("stderrBytes", p.StderrBytes, true)
	w.int("endedAt", p.EndedAt, true)
	w.int("lastOutputAt", p.LastOutputAt, true)
	return w.end()
}

// fastPayload encodes the event payloads of the spawn path by hand.
func fastPayload(payload any) ([]byte, bool) {
	switch p := payload.(type) { // (a nil pointer is Marshal's: msgpack nil)
	case StartedPayload:
		return appendStartedPayload(make([]byte, 0, 128), &p), true
	case *StartedPayload:
		if p != nil {
			return appendStartedPayload(make([]byte, 0, 128), p), true
		}
	case ExitPayload:
		return appendExitPayload(make([]byte, 0, 96), &p), true
	case *ExitPayload:
		if p != nil {
			return appendExitPayload(make([]byte, 0, 96), p), true
		}
	}
	return nil, false
}

// fastArgs encodes the request arguments of the spawn path by hand.
func fastArgs(b []byte, args any) ([]byte, bool) {
	switch a := args.(type) {
	case *SpawnArgs:
		if a != nil {
			return appendSpawnArgs(b, a)
		}
	case SpawnArgs:
		return appendSpawnArgs(b, &a)
	}
	return b, false
}

// fastResult encodes the reply results of the spawn path, and those
// carrying many jobs (fastjobs.go), by hand.
func fastResult(b []byte, result any) ([]byte, bool) {
	if out, ok := fastJobsResult(b, result); ok {
		return out, true
	}
	var r *SpawnResult
	switch v := result.(type) {
	case SpawnResult:
		r = &v
	case *SpawnResult:
		r = v
	}
	if r == nil {
		return b, false
	}
	w := newMW(b)
	w.str("jobId", r.JobID, false)
	w.key("job")
	var ok bool
	if w.b, ok = appendJobInfo(w.b, &r.Job); !ok {
		return b, false
	}
	w.bool("finished", r.Finished, true)
	return w.end(), true
}

// Decoding. Every decoder returns ok=false on anything it does not
// handle exactly like the generic decoder would (the caller then uses
// that); unknown keys are skipped, as the generic decoder does.

// str reads a str, bin or nil (empty) value as a string.
func (m *mp) str() (string, bool) {
	s, err := m.text()
	return string(s), err == nil
}

// text reads a str, bin or nil value holding a string: with m.strict, one
// that is not UTF-8 is an error (left to the generic path, which names it).
func (m *mp) text() ([]byte, error) {
	s, err := m.bytes()
	if err == nil && m.strict && !utf8.Valid(s) {
		return nil, errMP
	}
	return s, err
}

// boolean reads true, false or nil (false).
func (m *mp) boolean() (bool, bool) {
	c, err := m.byte()
	switch {
	case err != nil:
		return false, false
	case c == 0xc3:
		return true, true
	case c == 0xc2, c == 0xc0:
		return false, true
	}
	return false, false
}

// intIn reads an integer within [lo, hi].
func (m *mp) intIn(lo, hi int64) (int64, bool) {
	v, err := m.int()
	return v, err == nil && v >= lo && v <= hi
}

// uint reads a non-negative integer of any size (a negative one is left
// to the generic decoder, which wraps it).
func (m *mp) uint() (uint64, bool) {
	if m.i < len(m.b) {
		if c := m.b[m.i]; c >= 0xcc && c <= 0xcf {
			m.i++
			v, err := m.be(1 << (c - 0xcc))
			return v, err == nil
		}
	}
	v, err := m.int()
	return uint64(v), err == nil && v >= 0
}

// fastMaxElems bounds the elements the fast decoders allocate for; a
// longer array or map is left to the generic decoder (and its bounds).
const fastMaxElems = 4096

// strSlice reads an array of strings into *p; nil stays nil. A second
// value for the same field is left to the generic decoder (which keeps
// the first when the second is nil).
func (m *mp) strSlice(p *[]string) bool {
	if *p != nil {
		return false
	}
	v, ok := m.strSliceValue()
	*p = v
	return ok
}

func (m *mp) strSliceValue() ([]string, bool) {
	if m.i < len(m.b) && m.b[m.i] == 0xc0 {
		m.i++
		return nil, true
	}
	n, err := m.length(0x90, 0xdc, false)
	if err != nil || n > len(m.b)-m.i || n > fastMaxElems { // each element takes a byte at least
		return nil, false
	}
	out := make([]string, n)
	for k := range out {
		s, err := m.text()
		if err != nil {
			return nil, false
		}
		out[k] = string(s)
	}
	return out, true
}

// strStrMap reads a map of strings to strings into *p; nil stays nil. A
// second value for the same field is left to the generic decoder (which
// merges it into the first).
func (m *mp) strStrMap(p *map[string]string) bool {
	if *p != nil {
		return false
	}
	v, ok := m.strStrMapValue()
	*p = v
	return ok
}

func (m *mp) strStrMapValue() (map[string]string, bool) {
	if m.i < len(m.b) && m.b[m.i] == 0xc0 {
		m.i++
		return nil, true
	}
	n, err := m.mapLen()
	if err != nil || n > (len(m.b)-m.i)/2 || n > fastMaxElems {
		return nil, false
	}
	out := make(map[string]string, n)
	for ; n > 0; n-- {
		k, err := m.text()
		if err != nil {
			return nil, false
		}
		v, err := m.text()
		if err != nil {
			return nil, false
		}
		out[string(k)] = string(v)
	}
	return out, true
}

// fields walks a map, calling field for each key with m positioned at
// its value; field reports false to give up. Unknown keys are for field
// to skip (m.skip).
func (m *mp) fields(field func(key []byte) bool) bool {
	n, err := m.mapLen()
	if err != nil {
		return false
	}
	for ; n > 0; n-- {
		key, err := m.text()
		if err != nil || !field(key) {
			return false
		}
	}
	return true
}

func (m *mp) skipped() bool { return m.skip(0) == nil }

// skippedInRequest passes over the value of an unknown key of a request
// (the envelope or args map: one level down) holding it to the bounds
// the generic path applies to a whole request (decodeRequestValue):
// at most MaxArgs elements in any array or map, maxNesting levels in
// all, every str UTF-8. Anything beyond is left to the generic path,
// which refuses it (too-large, bad-request).
func (m *mp) skippedInRequest() bool {
	n, bad, err := walkValue(m.b[m.i:], MaxArgs, maxNesting-1, m.strict)
	if err != nil || bad >= 0 { // (a str not UTF-8: refused there too)
		return false
	}
	m.i += n
	return true
}

// spanOK is span reporting success as a bool.
func (m *mp) spanOK() ([]byte, bool) {
	b, err := m.span()
	return b, err == nil
}

// rawTo reads one value's encoding into *p (aliasing m.b) for a
// RawMessage field; nil reads as no value, as the generic decoder has it.
func (m *mp) rawTo(p *msgpack.RawMessage) bool {
	raw, ok := m.spanOK()
	if len(raw) == 1 && raw[0] == 0xc0 {
		raw = nil
	}
	*p = raw
	return ok
}

// Setters for the decoders' fields: each reads one value into *p.

func (m *mp) strTo(p *string) (ok bool) { *p, ok = m.str(); return ok }

func (m *mp) boolTo(p *bool) (ok bool) { *p, ok = m.boolean(); return ok }

func (m *mp) i64To(p *int64) (ok bool) { *p, ok = m.intIn(math.MinInt64, math.MaxInt64); return ok }

func (m *mp) intTo(p *int) bool {
	v, ok := m.intIn(math.MinInt, math.MaxInt)
	*p = int(v)
	return ok
}

// fastRequest decodes a request envelope; Args aliases b.
func fastRequest(b []byte) (*Request, bool) {
	m := mp{b: b, strict: true}
	var r Request
	seenArgs := false
	ok := m.fields(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "v":
			var v int64
			v, ok = m.intIn(math.MinInt32, math.MaxInt32)
			r.V = int(v)
		case "id":
			ok = m.strTo(&r.ID)
		case "op":
			var s string
			s, ok = m.str()
			r.Op = Op(s)
		case "args":
			if seenArgs {
				// (the generic path checks the value it drops too: a
				// str in it that is not UTF-8 is refused there)
				return false
			}
			seenArgs = true
			ok = m.rawTo(&r.Args)
		default:
			ok = m.skippedInRequest()
		}
		return ok
	})
	if !ok || m.i != len(b) {
		return nil, false
	}
	return &r, true
}

// fastSpawnArgs decodes spawn arguments without pty, restart or limits.
func fastSpawnArgs(b []byte, a *SpawnArgs) bool {
	m := mp{b: b, strict: true}
	ok := m.fields(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "jobId":
			ok = m.strTo(&a.JobID)
		case "name":
			ok = m.strTo(&a.Name)
		case "argv":
			ok = m.strSlice(&a.Argv)
		case "shell":
			ok = m.strTo(&a.Shell)
		case "cwd":
			ok = m.strTo(&a.Cwd)
		case "env":
			ok = m.strStrMap(&a.Env)
		case "envMode":
			ok = m.strTo(&a.EnvMode)
		case "timeoutMs":
			ok = m.i64To(&a.TimeoutMs)
		case "noOutputTimeoutMs":
			ok = m.i64To(&a.NoOutputTimeoutMs)
		case "graceMs":
			ok = m.i64To(&a.GraceMs)
		case "labels":
			ok = m.strStrMap(&a.Labels)
		case "sessionId":
			ok = m.strTo(&a.SessionID)
		case "stdin":
			ok = m.boolTo(&a.Stdin)
		case "strictOwnership":
			ok = m.boolTo(&a.StrictOwnership)
		case "notify":
			ok = m.boolTo(&a.Notify)
		case "watchdogIntervalMs":
			ok = m.i64To(&a.WatchdogIntervalMs)
		case "waitMs":
			ok = m.i64To(&a.WaitMs)
		case "pace":
			ok = m.boolTo(&a.Pace)
		case "queue":
			ok = m.boolTo(&a.Queue)
		case "output":
			ok = m.strTo(&a.Output)
		case "pty", "restart", "limits":
			return false // nested: the generic decoder
		default:
			ok = m.skippedInRequest()
		}
		return ok
	})
	return ok && m.i == len(b)
}

// fastJobInfo decodes a job without limits.
func fastJobInfo(m *mp, i *JobInfo) bool {
	return m.fields(func(key []byte) bool {
		var ok bool
		var v int64
		var s string
		switch string(key) {
		case "jobId":
			ok = m.strTo(&i.JobID)
		case "name":
			ok = m.strTo(&i.Name)
		case "state":
			s, ok = m.str()
			i.State = State(s)
		case "argv":
			ok = m.strSlice(&i.Argv)
		case "shell":
			ok = m.strTo(&i.Shell)
		case "cwd":
			ok = m.strTo(&i.Cwd)
		case "labels":
			ok = m.strStrMap(&i.Labels)
		case "sessionId":
			ok = m.strTo(&i.SessionID)
		case "pid":
			ok = m.intTo(&i.Pid)
		case "pgid":
			ok = m.intTo(&i.Pgid)
		case "createdAt":
			ok = m.i64To(&i.CreatedAt)
		case "startedAt":
			ok = m.i64To(&i.StartedAt)
		case "endedAt":
			ok = m.i64To(&i.EndedAt)
		case "lastOutputAt":
			ok = m.i64To(&i.LastOutputAt)
		case "reason":
			s, ok = m.str()
			i.Reason = Reason(s)
		case "exitCode":
			if m.i < len(m.b) && m.b[m.i] == 0xc0 {
				m.i++
				i.ExitCode, ok = nil, true
				break
			}
			v, ok = m.intIn(math.MinInt, math.MaxInt)
			c := int(v)
			i.ExitCode = &c
		case "signal":
			ok = m.strTo(&i.Signal)
		case "error":
			ok = m.strTo(&i.Error)
		case "timeoutMs":
			ok = m.i64To(&i.TimeoutMs)
		case "noOutputTimeoutMs":
			ok = m.i64To(&i.NoOutputTimeoutMs)
		case "stdoutBytes":
			ok = m.i64To(&i.StdoutBytes)
		case "stderrBytes":
			ok = m.i64To(&i.StderrBytes)
		case "retainedFrom":
			ok = m.i64To(&i.RetainedFrom)
		case "outputEnd":
			ok = m.i64To(&i.OutputEnd)
		case "lastSeq":
			i.LastSeq, ok = m.uint()
		case "pty":
			ok = m.boolTo(&i.Pty)
		case "rows":
			v, ok = m.intIn(0, math.MaxUint16)
			i.Rows = uint16(v)
		case "cols":
			v, ok = m.intIn(0, math.MaxUint16)
			i.Cols = uint16(v)
		case "bracketedPaste":
			ok = m.boolTo(&i.BracketedPaste)
		case "stdinOpen":
			ok = m.boolTo(&i.StdinOpen)
		case "outputHeld":
			ok = m.boolTo(&i.OutputHeld)
		case "outputPaced":
			ok = m.boolTo(&i.OutputPaced)
		case "outputDisk":
			ok = m.boolTo(&i.OutputDisk)
		case "outputDiskError":
			ok = m.strTo(&i.OutputDiskError)
		case "ownership":
			ok = m.strTo(&i.Ownership)
		case "cgroup":
			ok = m.strTo(&i.Cgroup)
		case "restart":
			ok = m.strTo(&i.Restart)
		case "attempt":
			ok = m.intTo(&i.Attempt)
		case "restarts":
			ok = m.intTo(&i.Restarts)
		case "restartsInWindow":
			ok = m.intTo(&i.RestartsInWindow)
		case "nextRestartAt":
			ok = m.i64To(&i.NextRestartAt)
		case "uptimeMs":
			ok = m.i64To(&i.UptimeMs)
		case "notify":
			ok = m.boolTo(&i.Notify)
		case "ready":
			ok = m.boolTo(&i.Ready)
		case "notifyStatus":
			ok = m.strTo(&i.NotifyStatus)
		case "lastWatchdogAt":
			ok = m.i64To(&i.LastWatchdogAt)
		case "stopping":
			ok = m.boolTo(&i.Stopping)
		case "usage":
			ok = m.usageTo(&i.Usage)
		case "limits":
			return false // the generic decoder
		default:
			ok = m.skipped()
		}
		return ok
	})
}

// fastSpawnResult decodes the result of a spawn reply.
func fastSpawnResult(b []byte, r *SpawnResult) bool {
	m := mp{b: b}
	seenJob := false
	ok := m.fields(func(key []byte) bool {
		switch string(key) {
		case "jobId":
			var ok bool
			ok = m.strTo(&r.JobID)
			return ok
		case "job":
			if seenJob {
				return false // the generic decoder merges a second one
			}
			seenJob = true
			return fastJobInfo(&m, &r.Job)
		case "finished":
			return m.boolTo(&r.Finished)
		}
		return m.skipped()
	})
	return ok && m.i == len(b)
}
