package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// Topic prefixes of event-plane messages. The first frame of every event
// message is its topic; SUB sockets filter by prefix.
const (
	// TopicJobPrefix prefixes every job event topic; subscribe to it for all jobs.
	TopicJobPrefix = "job/"
	// TopicHeartbeat is the topic of supervisor heartbeats.
	TopicHeartbeat = "sup/heartbeat"
)

// JobTopic is the topic of every event of job id. The trailing slash makes
// a prefix subscription match exactly one job.
func JobTopic(id string) string { return TopicJobPrefix + id + "/" }

// Marshal encodes v as msgpack.
func Marshal(v any) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, 256))
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(buf)
	enc.UseCompactInts(true)
	enc.SetCustomStructTag("msgpack")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

// unmarshal decodes msgpack b into v; a failure is a CodeBadRequest *Error
// naming what. Every generic decode goes through here: checkValue first
// makes sure no declared length exceeds b, so that what a peer sends
// can make the decoder allocate in proportion to its size only.
func unmarshal(b []byte, v any, what string) error {
	return unmarshalMax(b, v, what, 0)
}

// unmarshalMax is unmarshal refusing arrays and maps of more than
// maxElems elements (0: no such bound) with CodeTooLarge.
func unmarshalMax(b []byte, v any, what string, maxElems uint64) error {
	if err := checkValueMax(b, maxElems); err != nil {
		return checkError(err, what)
	}
	return decodeChecked(b, v, what)
}

// decodeRequestValue decodes b, a request envelope or args, into v as
// unmarshalMax with MaxArgs does, refusing (CodeBadRequest) any string
// that is not valid UTF-8: a string v holds (named by checkUTF8), or
// failing that a str anywhere in b (by its offset) — except one inside
// a *Request's args, which DecodeArgs names.
func decodeRequestValue(b []byte, v any, what string) error {
	_, bad, err := walkValue(b, MaxArgs, maxNesting, true)
	if err != nil {
		return checkError(err, what)
	}
	if err := decodeChecked(b, v, what); err != nil {
		return err
	}
	if err := checkUTF8(v, what); err != nil {
		return err
	}
	if bad < 0 {
		return nil
	}
	if r, ok := v.(*Request); ok {
		if _, inArgs, _ := walkValue(r.Args, MaxArgs, maxNesting, true); inArgs >= 0 {
			return nil // (named when the args are decoded)
		}
	}
	return Errorf(CodeBadRequest, "decode %s: the str at byte %d is not valid UTF-8: strings must be UTF-8 (bytes that are not go in bin fields such as write's data)", what, bad)
}

// checkError is the *Error of what for checkValue's err.
func checkError(err error, what string) error {
	if pe := (*Error)(nil); errors.As(err, &pe) {
		return Errorf(pe.Code, "decode %s: %s", what, pe.Message)
	}
	return Errorf(CodeBadRequest, "decode %s: %v", what, err)
}

// decodeChecked decodes b, which checkValue accepted, into v.
func decodeChecked(b []byte, v any, what string) error {
	dec := msgpack.GetDecoder()
	rd := bytes.NewReader(b)
	dec.Reset(rd) // (a bytes.Reader is read as it is: no read-ahead)
	if err := dec.Decode(v); err != nil {
		// Not back to the pool: a failed decode may have grown its
		// buffer, which the pool would keep.
		return Errorf(CodeBadRequest, "decode %s: %v", what, err)
	}
	msgpack.PutDecoder(dec)
	if n := rd.Len(); n > 0 {
		return Errorf(CodeBadRequest, "decode %s: %d bytes after its value", what, n)
	}
	return nil
}

// isMap reports whether b is (starts with) a msgpack map: fixmap, map 16
// or map 32. Envelopes and args are maps; the generic decoder would also
// take a struct encoded as an array.
func isMap(b []byte) bool {
	return len(b) > 0 && (b[0]&0xf0 == 0x80 || b[0] == 0xde || b[0] == 0xdf)
}

// DecodeRequest decodes and validates a request envelope. max bounds the
// body size (0 means MaxRequestBytes). Args are left raw; decode them with
// DecodeArgs. The returned error is always a *Error.
func DecodeRequest(b []byte, max int) (*Request, error) {
	if max <= 0 || max > MaxRequestBytes {
		max = MaxRequestBytes
	}
	if len(b) > max {
		// Not decoded, but answered under its id when that can be read
		// (the caller may have several requests in flight).
		return &Request{ID: peekRequestID(b)}, Errorf(CodeTooLarge, "request is %d bytes; the limit is %d", len(b), max)
	}
	if len(b) == 0 {
		return nil, Errorf(CodeBadRequest, "empty request body")
	}
	req, ok := fastRequest(b)
	if !ok {
		if !isMap(b) {
			return nil, Errorf(CodeBadRequest, "request must be a msgpack map (first byte 0x%02x)", b[0])
		}
		req = new(Request)
		if err := decodeRequestValue(b, req, "request"); err != nil {
			if CodeOf(err) == CodeTooLarge { // (as a body too large)
				return &Request{ID: peekRequestID(b)}, err
			}
			return nil, err
		}
	}
	// An over-long id is never echoed, whatever the reply.
	longID := len(req.ID) > MaxIDBytes
	if longID {
		req.ID = ""
	}
	if req.V != Version {
		return req, Errorf(CodeUnsupportedVersion, "protocol version %d is not supported; this server speaks %d", req.V, Version)
	}
	if longID {
		return req, Errorf(CodeInvalidArgument, "request id longer than %d bytes", MaxIDBytes)
	}
	if req.Op == "" {
		return req, Errorf(CodeBadRequest, "request has no op")
	}
	if !req.Op.Known() {
		return req, Errorf(CodeUnknownOp, "unknown op %.64q; known ops: %s", string(req.Op), opList())
	}
	return req, nil
}

// peekMaxKeys bounds the top-level keys peekRequestID reads (an envelope
// has four).
const peekMaxKeys = 16

// peekRequestID returns the id of the request envelope b, which is not
// decoded (it is too large), or "" when that cannot be told cheaply and
// for sure: b is not a map of at most peekMaxKeys str keys whose values
// can all be passed over (walked over, not decoded: nothing is allocated,
// every length is checked against b, nesting is bounded), or it has no
// "id", or more than one, or one that is not a str (or bin) of at most
// MaxIDBytes of UTF-8.
func peekRequestID(b []byte) string {
	m := mp{b: b}
	n, err := m.mapLen()
	if err != nil || n > peekMaxKeys {
		return ""
	}
	var id []byte
	found := false
	for ; n > 0; n-- {
		key, err := m.bytes()
		if err != nil {
			return ""
		}
		if string(key) == "id" {
			if found {
				return ""
			}
			if m.i < len(m.b) && m.b[m.i] == 0xc0 { // nil: no id
				return ""
			}
			if id, err = m.bytes(); err != nil || len(id) > MaxIDBytes || !utf8.Valid(id) {
				return ""
			}
			found = true
			continue
		}
		if m.skip(0) != nil {
			return ""
		}
	}
	return string(id)
}

func opList() string {
	s := make([]string, len(Ops))
	for i, o := range Ops {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// Validator is implemented by argument types that check themselves.
type Validator interface{ Validate() error }

// DecodeArgs decodes req.Args into v and validates it when v is a
// Validator. Missing args decode as the zero value. v nil (an op without
// args) only checks them as any args are checked: a map (or nil, or
// absent) within the request limits. Errors are *Error.
func DecodeArgs(req *Request, v any) error {
	if len(req.Args) > 0 && req.Args[0] != 0xc0 { // (nil: no args)
		if !isMap(req.Args) {
			return Errorf(CodeBadRequest, "%s args must be a msgpack map (first byte 0x%02x)", req.Op, req.Args[0])
		}
		if v == nil { // (an op without args: only checked)
			v = &struct{}{}
		}
		a, spawn := v.(*SpawnArgs)
		if !spawn || !fastSpawnArgs(req.Args, a) {
			if spawn {
				*a = SpawnArgs{} // whatever the fast path left
			}
			if err := decodeRequestValue(req.Args, v, string(req.Op)+" args"); err != nil {
				return err
			}
		}
	}
	if val, ok := v.(Validator); ok {
		return val.Validate()
	}
	return nil
}

// EncodeRequest builds a request envelope for op with args (nil for none).
func EncodeRequest(id string, op Op, args any) ([]byte, error) {
	w := newMW(make([]byte, 0, 128+len(id)+len(op)))
	w.int("v", Version, false)
	w.str("id", id, false)
	w.str("op", string(op), false)
	w.key("args")
	if b, ok := fastArgs(w.b, args); ok {
		w.b = b
		return w.end(), nil
	}
	req := Request{V: Version, ID: id, Op: op}
	if args != nil {
		raw, err := Marshal(args)
		if err != nil {
			return nil, err
		}
		req.Args = raw
	}
	return Marshal(&req)
}

// OKReply encodes a successful reply carrying result.
func OKReply(id string, result any) ([]byte, error) {
	id = validUTF8(id) // (a request's is: DecodeRequest)
	w := newMW(make([]byte, 0, 512))
	w.int("v", Version, false)
	w.str("id", id, false)
	w.bool("ok", true, false)
	w.key("result")
	if b, ok := fastResult(w.b, result); ok {
		w.b = b
		return w.end(), nil
	}
	raw, err := Marshal(result)
	if err != nil {
		return nil, err
	}
	return Marshal(&Reply{V: Version, ID: id, OK: true, Result: raw})
}

// ErrorReply encodes an error reply. It cannot fail. Its text is sent as
// valid UTF-8 even where a message quotes bytes nobody checked.
func ErrorReply(id string, e *Error) []byte {
	if e != nil && !e.validUTF8() {
		c := *e
		c.Code, c.Message = Code(validUTF8(string(c.Code))), validUTF8(c.Message)
		c.Details = make(map[string]string, len(e.Details))
		for k, v := range e.Details {
			c.Details[validUTF8(k)] = validUTF8(v)
		}
		e = &c
	}
	b, err := Marshal(&Reply{V: Version, ID: validUTF8(id), Error: e})
	if err != nil {
		b, _ = Marshal(&Reply{V: Version, ID: id, Error: Errorf(CodeInternal, "encode error reply")})
	}
	return b
}

// DecodeReply decodes a reply envelope.
func DecodeReply(b []byte) (*Reply, error) {
	var r Reply
	if err := unmarshal(b, &r, "reply"); err != nil {
		return nil, err
	}
	if !r.OK && r.Error == nil {
		return nil, Errorf(CodeBadRequest, "reply is neither ok nor error")
	}
	return &r, nil
}

// DecodeResult decodes a successful reply's result into v, or returns the
// reply's *Error.
func (r *Reply) DecodeResult(v any) error {
	if !r.OK {
		return r.Error
	}
	if v == nil || len(r.Result) == 0 {
		return nil
	}
	switch res := v.(type) {
	case *SpawnResult:
		if fastSpawnResult(r.Result, res) {
			return nil
		}
		*res = SpawnResult{} // whatever the fast path left
	case *StatusResult:
		if fastStatusResult(r.Result, res) {
			return nil
		}
		*res = StatusResult{}
	case *ListJobsResult:
		if fastListJobsResult(r.Result, res) {
			return nil
		}
		*res = ListJobsResult{}
	}
	return unmarshal(r.Result, v, "result")
}

// NewEvent builds an event with payload encoded.
func NewEvent(jobID string, seq uint64, ts int64, kind Kind, payload any) (Event, error) {
	raw, ok := fastPayload(payload)
	if !ok {
		var err error
		if raw, err = Marshal(payload); err != nil {
			return Event{}, err
		}
	}
	return Event{V: Version, JobID: jobID, Seq: seq, Ts: ts, Kind: kind, Payload: raw}, nil
}

// DecodeEvent decodes an event body.
func DecodeEvent(b []byte) (*Event, error) {
	var ev Event
	if err := unmarshal(b, &ev, "event"); err != nil {
		return nil, err
	}
	if ev.Kind == "" {
		return nil, Errorf(CodeBadRequest, "event has no kind")
	}
	return &ev, nil
}

// DecodePayload decodes the event's payload into v.
func (e *Event) DecodePayload(v any) error {
	return unmarshal(e.Payload, v, string(e.Kind)+" payload")
}

// Validate checks spawn arguments against the protocol limits.
func (a *SpawnArgs) Validate() error {
	if a.JobID != "" {
		if err := ValidJobIDChoice(a.JobID); err != nil {
			return err
		}
	}
	if a.Name != "" {
		if err := ValidJobName(a.Name); err != nil {
			return err
		}
	}
	switch {
	case len(a.Argv) == 0 && a.Shell == "":
		return Errorf(CodeInvalidArgument, "spawn needs argv or shell; both are empty")
	case a.Output != "" && a.Output != OutputDisk && a.Output != OutputMemory:
		return Errorf(CodeInvalidArgument, "output %.32q: want %q or %q (or leave it out for the supervisor's default)", a.Output, OutputDisk, OutputMemory)
	case a.Queue && a.Restart != nil && a.Restart.Policy != "" && a.Restart.Policy != RestartNever:
		return Errorf(CodeInvalidArgument, "queue is for one-shot jobs: a service (restart %s) is not queued", a.Restart.Policy)
	case len(a.Argv) > 0 && a.Shell != "":
		return Errorf(CodeInvalidArgument, "spawn takes argv or shell, not both")
	case len(a.Argv) > 0 && a.Argv[0] == "":
		return Errorf(CodeInvalidArgument, "argv[0] is empty")
	case len(a.Argv) > MaxArgs:
		return Errorf(CodeTooLarge, "argv has %d elements; the limit is %d", len(a.Argv), MaxArgs)
	}
	size := len(a.Shell)
	for _, s := range a.Argv {
		size += len(s)
		if strings.IndexByte(s, 0) >= 0 {
			return Errorf(CodeInvalidArgument, "argv element contains a NUL byte")
		}
	}
	if strings.IndexByte(a.Shell, 0) >= 0 {
		return Errorf(CodeInvalidArgument, "shell command contains a NUL byte")
	}
	if size > MaxArgBytes {
		return Errorf(CodeTooLarge, "argv is %d bytes; the limit is %d", size, MaxArgBytes)
	}
	if len(a.Env) > MaxEnv {
		return Errorf(CodeTooLarge, "env has %d entries; the limit is %d", len(a.Env), MaxEnv)
	}
	size = 0
	for k, v := range a.Env {
		size += len(k) + len(v)
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return Errorf(CodeInvalidArgument, "env key %.64q is empty or contains '=' or NUL", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Errorf(CodeInvalidArgument, "env value of %.64q contains a NUL byte", k)
		}
	}
	if size > MaxEnvBytes {
		return Errorf(CodeTooLarge, "env is %d bytes; the limit is %d", size, MaxEnvBytes)
	}
	switch a.EnvMode {
	case "", EnvInherit, EnvReplace:
	default:
		return Errorf(CodeInvalidArgument, "envMode %.32q is not %q or %q", a.EnvMode, EnvInherit, EnvReplace)
	}
	if strings.IndexByte(a.Cwd, 0) >= 0 {
		return Errorf(CodeInvalidArgument, "cwd contains a NUL byte")
	}
	if a.WaitMs < 0 || a.WaitMs > MaxWaitMs {
		return Errorf(CodeInvalidArgument, "waitMs is %d; it must be 0..%d (1 hour)", a.WaitMs, int64(MaxWaitMs))
	}
	for name, v := range map[string]int64{"timeoutMs": a.TimeoutMs, "noOutputTimeoutMs": a.NoOutputTimeoutMs, "graceMs": a.GraceMs} {
		if v < 0 {
			return negativeErr(name, v)
		}
		if v > MaxTimeoutMs {
			return Errorf(CodeInvalidArgument, "%s is %d; the limit is %d (7 days)", name, v, int64(MaxTimeoutMs))
		}
	}
	if a.Pty != nil {
		if a.Stdin {
			return Errorf(CodeInvalidArgument, "stdin and pty exclude each other (a pty job's input is its terminal)")
		}
		if a.Pty.Rows < 0 || a.Pty.Cols < 0 || a.Pty.Rows > MaxTermSize || a.Pty.Cols > MaxTermSize {
			e := Errorf(CodeInvalidArgument, "pty.rows and pty.cols must be 1..%d, or 0 for 24x80 (got %dx%d)", MaxTermSize, a.Pty.Rows, a.Pty.Cols)
			e.Details = map[string]string{"field": "pty"}
			return e
		}
		if len(a.Pty.Term) > 64 || strings.ContainsAny(a.Pty.Term, "\x00=") {
			return Errorf(CodeInvalidArgument, "pty.term must be at most 64 bytes without NUL or '='")
		}
	}
	if err := validLabels(a.Labels); err != nil {
		return err
	}
	if len(a.SessionID) > MaxIDBytes || !utf8.ValidString(a.SessionID) {
		return Errorf(CodeInvalidArgument, "sessionId must be valid UTF-8 of at most %d bytes", MaxIDBytes)
	}
	return a.validateService()
}

// ValidJobIDChoice checks a job id chosen by a caller (SpawnArgs.JobID):
// 1..MaxIDBytes bytes of ASCII letters, digits and "._:-", starting with
// a letter or digit. The set keeps ids safe wherever they go: in event
// topics ("job/<id>/": no "/", which would let the subscription of one
// job match another's), in file names (the notify socket's; no "." or
// ".." alone), on command lines (no leading "-", no spaces or quotes), in
// environments and logs (no control characters). UUIDs, ULIDs and
// "name-1234" ids fit; the supervisor's own ("j-" and 16 hex digits)
// fit too, and may be chosen.
func ValidJobIDChoice(id string) error {
	if id == "" || len(id) > MaxIDBytes {
		return Errorf(CodeInvalidArgument, "jobId must be 1..%d bytes (got %d)", MaxIDBytes, len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._:-", rune(c))) {
			return Errorf(CodeInvalidArgument, "jobId %.64q: byte %d (%q) is not allowed: a job id is ASCII letters, digits and . _ : - (starting with a letter or digit)", id, i, id[i:i+1])
		}
	}
	return nil
}

func validJobID(id string) error {
	if id == "" {
		return Errorf(CodeInvalidArgument, "jobId is required")
	}
	if len(id) > MaxIDBytes {
		return Errorf(CodeInvalidArgument, "jobId longer than %d bytes", MaxIDBytes)
	}
	return nil
}

// Validate checks kill arguments.
func (a *KillArgs) Validate() error {
	if err := validJobID(a.JobID); err != nil {
		return err
	}
	if a.Signal != "" {
		if _, err := ParseSignal(a.Signal); err != nil {
			return err
		}
	}
	return nil
}

// negativeErr is the error for integer argument name that decoded as v <
// 0: sent negative, or as an unsigned number past 2^63-1 (which msgpack
// decoding into a signed field wraps).
func negativeErr[T int | int64](name string, v T) error {
	return Errorf(CodeInvalidArgument, "%s is %d: negative, or too large (it must fit in 63 bits)", name, v)
}

// Validate checks poll arguments.
func (a *PollArgs) Validate() error {
	if err := validJobID(a.JobID); err != nil {
		return err
	}
	if a.Cursor < 0 {
		return negativeErr("cursor", a.Cursor)
	}
	if a.MaxBytes < 0 {
		return negativeErr("maxBytes", a.MaxBytes)
	}
	return nil
}

// Validate checks subscribe arguments.
func (a *SubscribeArgs) Validate() error {
	if err := validJobID(a.JobID); err != nil {
		return err
	}
	if a.Limit < 0 {
		return negativeErr("limit", a.Limit)
	}
	if a.FromSeq > 1<<62 {
		// (a negative number sent for the unsigned field arrives so)
		return Errorf(CodeInvalidArgument, "fromSeq %d is not a seq (seqs count from 1; a negative number?)", a.FromSeq)
	}
	return nil
}

// Validate checks cancel arguments.
func (a *CancelArgs) Validate() error {
	if a.RequestID == "" || len(a.RequestID) > MaxIDBytes {
		return Errorf(CodeInvalidArgument, "requestId must be 1..%d bytes", MaxIDBytes)
	}
	return nil
}

// Validate checks pace arguments.
func (a *PaceArgs) Validate() error {
	if err := validJobID(a.JobID); err != nil {
		return err
	}
	if a.Offset < 0 {
		return negativeErr("offset", a.Offset)
	}
	if a.Offset > maxOffset {
		return Errorf(CodeInvalidArgument, "offset %d is past any job's output (at most 2^62)", a.Offset)
	}
	return nil
}

// maxOffset bounds output offsets a client may send: no job's output gets
// near it (a supervisor crash moves a job's offsets on by 2^30).
const maxOffset = 1 << 62

// Validate checks write arguments.
func (a *WriteArgs) Validate() error {
	if err := validJobID(a.JobID); err != nil {
		return err
	}
	if len(a.Data) > MaxWriteBytes {
		return Errorf(CodeTooLarge, "write of %d bytes; the limit is %d", len(a.Data), MaxWriteBytes)
	}
	if len(a.Data) == 0 && !a.EOF {
		return Errorf(CodeInvalidArgument, "write needs data or eof")
	}
	return nil
}

// Validate checks resize arguments.
func (a *ResizeArgs) Validate() error {
	if err := validJobID(a.JobID); err != nil {
		return err
	}
	if a.Rows < 1 || a.Cols < 1 || a.Rows > MaxTermSize || a.Cols > MaxTermSize {
		return Errorf(CodeInvalidArgument, "rows and cols must be 1..%d (got %dx%d)", MaxTermSize, a.Rows, a.Cols)
	}
	return nil
}

// Validate checks list-jobs arguments.
func (a *ListJobsArgs) Validate() error {
	switch a.State {
	case "", StateQueued, StateStarting, StateRunning, StateExiting, StateExited, StateRestarting:
	default:
		return Errorf(CodeInvalidArgument, "state %.32q is not one of queued, starting, running, exiting, restarting, exited", string(a.State))
	}
	if a.Limit < 0 {
		return negativeErr("limit", a.Limit)
	}
	if len(a.IDPrefix) > MaxIDBytes {
		return Errorf(CodeInvalidArgument, "idPrefix longer than %d bytes", MaxIDBytes)
	}
	if err := ValidNamePattern(a.Name); err != nil {
		return err
	}
	if err := validLabels(a.Labels); err != nil {
		return err
	}
	if a.After != "" {
		if _, _, _, err := ParseListCursor(a.After); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks the jobId of ops naming one job (status allows empty).
func (a *JobArgs) Validate() error {
	if len(a.JobID) > MaxIDBytes {
		return Errorf(CodeInvalidArgument, "jobId longer than %d bytes", MaxIDBytes)
	}
	return nil
}

var signals = map[string]syscall.Signal{
	"SIGHUP": syscall.SIGHUP, "SIGINT": syscall.SIGINT, "SIGQUIT": syscall.SIGQUIT,
	"SIGILL": syscall.SIGILL, "SIGTRAP": syscall.SIGTRAP, "SIGABRT": syscall.SIGABRT,
	"SIGBUS": syscall.SIGBUS, "SIGFPE": syscall.SIGFPE, "SIGKILL": syscall.SIGKILL,
	"SIGUSR1": syscall.SIGUSR1, "SIGSEGV": syscall.SIGSEGV, "SIGUSR2": syscall.SIGUSR2,
	"SIGPIPE": syscall.SIGPIPE, "SIGALRM": syscall.SIGALRM, "SIGTERM": syscall.SIGTERM,
	"SIGSTKFLT": syscall.SIGSTKFLT, "SIGCHLD": syscall.SIGCHLD, "SIGCONT": syscall.SIGCONT,
	"SIGSTOP": syscall.SIGSTOP, "SIGTSTP": syscall.SIGTSTP, "SIGTTIN": syscall.SIGTTIN,
	"SIGTTOU": syscall.SIGTTOU, "SIGURG": syscall.SIGURG, "SIGXCPU": syscall.SIGXCPU,
	"SIGXFSZ": syscall.SIGXFSZ, "SIGVTALRM": syscall.SIGVTALRM, "SIGPROF": syscall.SIGPROF,
	"SIGWINCH": syscall.SIGWINCH, "SIGIO": syscall.SIGIO, "SIGPWR": syscall.SIGPWR,
	"SIGSYS": syscall.SIGSYS,
}

// ParseSignal accepts a signal name with or without the SIG prefix
// ("TERM", "SIGTERM", case-insensitive) or a number, and returns it.
func ParseSignal(s string) (syscall.Signal, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(u, "SIG") {
		u = "SIG" + u
	}
	if sig, ok := signals[u]; ok {
		return sig, nil
	}
	for _, sig := range signals {
		if fmt.Sprint(int(sig)) == strings.TrimSpace(s) {
			return sig, nil
		}
	}
	return 0, Errorf(CodeInvalidArgument, "unknown signal %.32q (use e.g. SIGTERM, SIGKILL, SIGINT, SIGHUP)", s)
}

// SignalName returns the canonical name of sig ("SIGTERM"), or "signal N".
func SignalName(sig syscall.Signal) string {
	for name, s := range signals {
		if s == sig {
			return name
		}
	}
	return fmt.Sprintf("signal %d", int(sig))
}
