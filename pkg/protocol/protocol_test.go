package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestRequestRoundTrip(t *testing.T) {
	b, err := EncodeRequest("r1", OpSpawn, &SpawnArgs{Argv: []string{"echo", "hi"}, TimeoutMs: 5})
	if err != nil {
		t.Fatal(err)
	}
	req, err := DecodeRequest(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	var a SpawnArgs
	if err := DecodeArgs(req, &a); err != nil {
		t.Fatal(err)
	}
	if req.ID != "r1" || req.Op != OpSpawn || a.Argv[1] != "hi" || a.TimeoutMs != 5 {
		t.Fatalf("round trip: %+v %+v", req, a)
	}
}

// TestWireFieldNames pins the wire names other-language clients rely on.
func TestWireFieldNames(t *testing.T) {
	b, _ := Marshal(&Event{V: 2, JobID: "j", Seq: 3, Ts: 4, Kind: KindStdout, Payload: mustMarshal(OutputPayload{Offset: 1, Data: []byte("x")})})
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "jobId", "seq", "ts", "kind", "payload"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("event lacks %q: %v", k, m)
		}
	}
	p := m["payload"].(map[string]any)
	if _, ok := p["data"].([]byte); !ok {
		t.Fatalf("output data must be msgpack bin, got %T", p["data"])
	}
}

func mustMarshal(v any) []byte {
	b, err := Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestDecodeRequestErrors(t *testing.T) {
	cases := []struct {
		name string
		body []byte
		code Code
	}{
		{"empty", nil, CodeBadRequest},
		{"garbage", []byte{0xc1}, CodeBadRequest},
		{"too large", bytes.Repeat([]byte{0}, MaxRequestBytes+1), CodeTooLarge},
		{"version", mustMarshal(map[string]any{"v": 3, "op": "health"}), CodeUnsupportedVersion},
		{"unknown op", mustMarshal(map[string]any{"v": 2, "op": "nope"}), CodeUnknownOp},
		{"long id", mustMarshal(map[string]any{"v": 2, "op": "health", "id": string(bytes.Repeat([]byte{'a'}, 200))}), CodeInvalidArgument},
		// The envelope is a map: the generic decoder took a struct
		// encoded as an array (found by a client written from the docs).
		{"array envelope", mustMarshal([]any{2, "arr", "health", map[string]any{}}), CodeBadRequest},
		{"bytes after the envelope", append(mustMarshal(map[string]any{"v": 2, "op": "health", "id": "x", "args": map[string]any{"k": []int{1}}}), 1), CodeBadRequest},
	}
	for _, tc := range cases {
		_, err := DecodeRequest(tc.body, 0)
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != tc.code {
			t.Errorf("%s: want %s, got %v", tc.name, tc.code, err)
		}
	}
	// Args: a map or nil; a negative fromSeq is no seq.
	for name, tc := range map[string]struct {
		args any
		v    any
		code Code
	}{
		"array args":       {[]any{"j-1", 1, 0}, &SubscribeArgs{}, CodeBadRequest},
		"negative fromSeq": {map[string]any{"jobId": "j-1", "fromSeq": -5}, &SubscribeArgs{}, CodeInvalidArgument},
	} {
		req, err := DecodeRequest(mustMarshal(map[string]any{"v": 2, "op": "subscribe", "args": tc.args}), 0)
		if err != nil {
			t.Fatal(err)
		}
		err = DecodeArgs(req, tc.v)
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != tc.code {
			t.Errorf("%s: want %s, got %v", name, tc.code, err)
		}
	}
	// An unsigned number past 2^63-1 decodes into a signed field as a
	// negative one: the message says it may be either.
	for op, tc := range map[Op]struct {
		args map[string]any
		v    any
	}{
		OpPoll:  {map[string]any{"jobId": "j-1", "cursor": uint64(1<<64 - 1)}, &PollArgs{}},
		OpPace:  {map[string]any{"jobId": "j-1", "offset": uint64(1 << 63)}, &PaceArgs{}},
		OpSpawn: {map[string]any{"argv": []string{"x"}, "timeoutMs": uint64(1<<64 - 2)}, &SpawnArgs{}},
	} {
		req, err := DecodeRequest(mustMarshal(map[string]any{"v": 2, "op": op, "args": tc.args}), 0)
		if err != nil {
			t.Fatal(err)
		}
		err = DecodeArgs(req, tc.v)
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != CodeInvalidArgument || !strings.Contains(pe.Message, "too large") {
			t.Errorf("%s with a huge unsigned number: %v", op, err)
		}
	}
	req, err := DecodeRequest(mustMarshal(map[string]any{"v": 2, "op": "health", "args": nil}), 0)
	if err != nil {
		t.Fatal(err)
	}
	var pe *Error // nil args are no args: zero values, then Validate (no jobId)
	if err := DecodeArgs(req, &SubscribeArgs{}); !errors.As(err, &pe) || pe.Code != CodeInvalidArgument || !strings.Contains(pe.Message, "jobId") {
		t.Errorf("nil args: %v", err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]string{"TERM": "SIGTERM", "sigkill": "SIGKILL", "9": "SIGKILL", " int ": "SIGINT"} {
		sig, err := ParseSignal(in)
		if err != nil || SignalName(sig) != want {
			t.Errorf("%q: %v %v", in, SignalName(sig), err)
		}
	}
	if _, err := ParseSignal("SIGNOPE"); CodeOf(err) != CodeInvalidArgument {
		t.Fatalf("bad signal: %v", err)
	}
	// Every standard signal has its name (a crash reads SIGSEGV, not
	// "signal 11") and parses back from it and from its number.
	for sig := syscall.Signal(1); sig <= 31; sig++ {
		name := SignalName(sig)
		if !strings.HasPrefix(name, "SIG") {
			t.Errorf("signal %d has no name: %q", int(sig), name)
			continue
		}
		for _, in := range []string{name, fmt.Sprint(int(sig))} {
			if got, err := ParseSignal(in); err != nil || got != sig {
				t.Errorf("ParseSignal(%q) = %v, %v; want %d", in, got, err, int(sig))
			}
		}
	}
}

// FuzzDecodeRequest: whatever the bytes, decoding returns a request or a
// *Error, never panics, and args of every op decode or fail cleanly.
func FuzzDecodeRequest(f *testing.F) {
	files, _ := filepath.Glob("testdata/seed/*")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil {
			f.Add(b)
		}
	}
	for _, op := range Ops {
		b, _ := EncodeRequest("id", op, map[string]any{"jobId": "j-1", "argv": []string{"x"}})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The id of a request too large to decode, read without decoding
		// it: never over-long, and never another than decoding reads.
		peeked := peekRequestID(b)
		if len(peeked) > MaxIDBytes {
			t.Fatalf("peekRequestID returned %d bytes", len(peeked))
		}
		req, err := DecodeRequest(b, 0)
		if req != nil && peeked != "" && req.ID != peeked {
			t.Fatalf("peekRequestID %q, decoded id %q", peeked, req.ID)
		}
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Code == "" {
				t.Fatalf("error without code: %v", err)
			}
			return
		}
		for _, v := range []any{nil, &SpawnArgs{}, &PollArgs{}, &KillArgs{}, &JobArgs{}, &ListJobsArgs{}, &SubscribeArgs{}} {
			if err := DecodeArgs(req, v); err != nil {
				var pe *Error
				if !errors.As(err, &pe) {
					t.Fatalf("args error without code: %v", err)
				}
			} else if err := checkValueMax(b, MaxArgs); err != nil {
				// A request taken, args and all, is within the request
				// limits everywhere (unknown keys too).
				t.Fatalf("request and %T args accepted, but: %v", v, err)
			}
		}
		if _, err := DecodeEvent(b); err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("event error without code: %v", err)
			}
		}
	})
}

// rawMap encodes a map with its entries in the order given (values
// already encoded with Marshal).
func rawMap(kv ...any) []byte {
	w := newMW(nil)
	for i := 0; i < len(kv); i += 2 {
		w.key(kv[i].(string))
		if raw, ok := kv[i+1].([]byte); ok {
			w.b = append(w.b, raw...)
			continue
		}
		v, err := Marshal(kv[i+1])
		if err != nil {
			panic(err)
		}
		w.b = append(w.b, v...)
	}
	return w.end()
}

// TestOversizedRequestKeepsItsID: a request over the size limit is refused
// (too-large) under its own id when that can be read safely from the top
// of the body, so that a client with several requests in flight can tell
// which was refused; otherwise, and for an over-long id, under "".
func TestOversizedRequestKeepsItsID(t *testing.T) {
	big := strings.Repeat("x", 70<<10)
	deep := append(bytes.Repeat([]byte{0x91}, 150), 0xc0)
	long := strings.Repeat("i", MaxIDBytes+1)
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"id first", rawMap("v", 2, "id", "r-1", "op", "spawn", "args", map[string]any{"argv": []string{"echo", big}}), "r-1"},
		{"id last", rawMap("v", 2, "op", "spawn", "args", map[string]any{"argv": []string{"echo", big}}, "id", "r-2"), "r-2"},
		{"id as bin", rawMap("v", 2, "args", map[string]any{"data": []byte(big)}, "id", []byte{0xc4, 3, 'r', '-', '3'}), "r-3"}, // (raw: bin 8)
		{"unknown keys", rawMap("v", 2, "x", []int{1, 2, 3}, "y", map[string]string{"a": big}, "id", "r-4", "op", "write"), "r-4"},
		{"no id", rawMap("v", 2, "op", "spawn", "args", map[string]any{"argv": []string{big}}), ""},
		{"nil id", rawMap("v", 2, "id", nil, "args", map[string]any{"argv": []string{big}}), ""},
		{"id not a string", rawMap("v", 2, "id", 7, "args", map[string]any{"argv": []string{big}}), ""},
		{"over-long id", rawMap("v", 2, "id", long, "op", "spawn", "args", map[string]any{"argv": []string{big}}), ""},
		{"two ids", rawMap("v", 2, "id", "a", "args", big, "id", "b"), ""},
		{"id after a value cut short", append(rawMap("v", 2, "args", big, "id", "r-5")[:20], make([]byte, 70<<10)...), ""},
		{"id after a value too deep", rawMap("v", 2, "args", deep, "pad", big, "id", "r-6"), ""},
		{"not a map", append([]byte{0x92, 0xa2, 'i', 'd', 0xa1, 'x'}, []byte(big)...), ""},
		{"raw bytes", bytes.Repeat([]byte{'a'}, 70<<10), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := DecodeRequest(c.body, 64<<10)
			if CodeOf(err) != CodeTooLarge {
				t.Fatalf("want too-large, got %v", err)
			}
			if req == nil || req.ID != c.want {
				t.Fatalf("request %+v; want id %q", req, c.want)
			}
		})
	}
}

// TestRequestLimitsEverywhere: the 4096-element limit of a request holds
// in keys the server does not know (envelope and spawn args) as in args,
// on the hand-written decoders' path as on the generic one; nesting too.
func TestRequestLimitsEverywhere(t *testing.T) {
	ints := func(n int) []int { return make([]int, n) }
	entries := func(n int) map[string]int {
		m := make(map[string]int, n)
		for i := range n {
			m[fmt.Sprint(i)] = i
		}
		return m
	}
	nest := func(n int) []byte { return append(bytes.Repeat([]byte{0x91}, n), 0xc0) }
	spawn := func(extra ...any) []byte {
		return rawMap("v", 2, "id", "s", "op", "spawn", "args", rawMap(append([]any{"argv", []string{"true"}}, extra...)...))
	}
	for _, c := range []struct {
		name string
		body []byte
		want Code // "" accepted
	}{
		{"array of 4096 under an unknown key", rawMap("v", 2, "id", "x", "op", "health", "junk", ints(MaxArgs)), ""},
		{"array of 4097 under an unknown key", rawMap("v", 2, "id", "x", "op", "health", "junk", ints(MaxArgs+1)), CodeTooLarge},
		{"array of 5000 under an unknown key", rawMap("v", 2, "id", "x", "op", "health", "junk", ints(5000)), CodeTooLarge},
		{"map of 5000 under an unknown key", rawMap("v", 2, "id", "x", "op", "health", "junk", entries(5000)), CodeTooLarge},
		{"array of 5000 deep in an unknown key", rawMap("v", 2, "id", "x", "op", "health", "junk", []any{map[string]any{"a": ints(5000)}}), CodeTooLarge},
		{"unknown key before the known ones", rawMap("junk", ints(5000), "v", 2, "id", "x", "op", "health"), CodeTooLarge},
		{"99 levels under an unknown key", rawMap("v", 2, "id", "x", "op", "health", "junk", nest(maxNesting-1)), ""},
		{"100 levels under an unknown key", rawMap("v", 2, "id", "x", "op", "health", "junk", nest(maxNesting)), CodeBadRequest},
		{"spawn args with 4096 under an unknown key", spawn("junk", ints(MaxArgs)), ""},
		{"spawn args with 5000 under an unknown key", spawn("junk", ints(5000)), CodeTooLarge},
		{"spawn args with a map of 5000 under an unknown key", spawn("junk", entries(5000)), CodeTooLarge},
		{"spawn args with 98 levels under an unknown key", spawn("junk", nest(maxNesting-2)), ""},
		{"spawn args with 100 levels under an unknown key", spawn("junk", nest(maxNesting)), CodeBadRequest},
		{"argv of 5000", rawMap("v", 2, "id", "x", "op", "spawn", "args", map[string]any{"argv": make([]string, 5000)}), CodeTooLarge},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := DecodeRequest(c.body, 0)
			if err == nil {
				switch req.Op {
				case OpSpawn:
					var a SpawnArgs
					err = DecodeArgs(req, &a)
				default:
					err = DecodeArgs(req, nil)
				}
			}
			if c.want == "" && err != nil || c.want != "" && CodeOf(err) != c.want {
				t.Fatalf("want %q, got %v", c.want, err)
			}
		})
	}
}

// TestOverlongIDNeverEchoed: whatever else is wrong with a request, an id
// over MaxIDBytes is not returned for the reply to carry.
func TestOverlongIDNeverEchoed(t *testing.T) {
	long := strings.Repeat("i", MaxIDBytes+1)
	for _, c := range []struct {
		body []byte
		want Code
	}{
		{rawMap("v", 1, "id", long, "op", "health"), CodeUnsupportedVersion},
		{rawMap("id", long, "op", "health"), CodeUnsupportedVersion},
		{rawMap("v", 2, "id", long, "op", "health"), CodeInvalidArgument},
		{rawMap("v", 2, "id", long, "op", "nope"), CodeInvalidArgument},
		{rawMap("v", 2, "id", long), CodeInvalidArgument},
		{rawMap("v", 1, "id", long, "op", "health", "x", rawMap("a", 1)), CodeUnsupportedVersion}, // (generic path: a nested map)
	} {
		req, err := DecodeRequest(c.body, 0)
		if CodeOf(err) != c.want || req == nil || req.ID != "" {
			t.Errorf("%x: want %s and no id, got %v, %+v", c.body[:16], c.want, err, req)
		}
	}
}

// TestArgsMustBeAMap: an op without args (health) refuses args that are
// not a map as every op does; nil and absent args are none.
func TestArgsMustBeAMap(t *testing.T) {
	for _, args := range []any{[]int{1}, "x", 5, true} {
		req, err := DecodeRequest(rawMap("v", 2, "id", "h", "op", "health", "args", args), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := DecodeArgs(req, nil); CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), "args must be a msgpack map") {
			t.Errorf("health args %v: %v", args, err)
		}
	}
	for _, body := range [][]byte{rawMap("v", 2, "op", "health"), rawMap("v", 2, "op", "health", "args", nil), rawMap("v", 2, "op", "health", "args", map[string]int{"x": 1})} {
		req, err := DecodeRequest(body, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := DecodeArgs(req, nil); err != nil {
			t.Errorf("%x: %v", body, err)
		}
	}
}

// TestListCursor: a cursor names the place of a job in list-jobs order;
// anything else is invalid-argument.
func TestListCursor(t *testing.T) {
	c := ListCursor(1712345678901, 42, "j-0123")
	if at, n, id, err := ParseListCursor(c); err != nil || at != 1712345678901 || n != 42 || id != "j-0123" {
		t.Fatalf("%q: %d %d %q %v", c, at, n, id, err)
	}
	// (the older form, without the creation count)
	if at, n, id, err := ParseListCursor("1712345678901:j-0123"); err != nil || at != 1712345678901 || n != 0 || id != "j-0123" {
		t.Fatalf("older cursor: %d %d %q %v", at, n, id, err)
	}
	for _, bad := range []string{"j-0123", "12:", ":j-1", "x:j-1", "1:" + strings.Repeat("j", MaxIDBytes+1), "1:x:j-1", "1:2:", "1:-2:j-1", "-5:j-1"} {
		if err := (&ListJobsArgs{After: bad}).Validate(); CodeOf(err) != CodeInvalidArgument {
			t.Errorf("after %q: %v", bad, err)
		}
	}
	if err := (&ListJobsArgs{Limit: -1}).Validate(); CodeOf(err) != CodeInvalidArgument {
		t.Errorf("limit -1: %v", err)
	}
}

// TestPaceArgs: pace's offset is 0..2^62 (larger ones are no job's output:
// an offset near 2^63 overflowed the window and held the job for good).
func TestPaceArgs(t *testing.T) {
	for _, c := range []struct {
		a    PaceArgs
		want Code
	}{
		{PaceArgs{JobID: "j-1"}, ""},
		{PaceArgs{JobID: "j-1", Offset: 1 << 62}, ""},
		{PaceArgs{JobID: "j-1", Offset: 1<<62 + 1}, CodeInvalidArgument},
		{PaceArgs{JobID: "j-1", Offset: 1<<63 - 1}, CodeInvalidArgument},
		{PaceArgs{JobID: "j-1", Offset: -1}, CodeInvalidArgument},
		{PaceArgs{Offset: 5}, CodeInvalidArgument},
	} {
		if err := c.a.Validate(); c.want == "" && err != nil || c.want != "" && CodeOf(err) != c.want {
			t.Errorf("%+v: %v, want %q", c.a, err, c.want)
		}
	}
}
