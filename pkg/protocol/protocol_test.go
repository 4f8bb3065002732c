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
		req, err := DecodeRequest(b, 0)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Code == "" {
				t.Fatalf("error without code: %v", err)
			}
			return
		}
		for _, v := range []any{&SpawnArgs{}, &PollArgs{}, &KillArgs{}, &JobArgs{}, &ListJobsArgs{}, &SubscribeArgs{}} {
			if err := DecodeArgs(req, v); err != nil {
				var pe *Error
				if !errors.As(err, &pe) {
					t.Fatalf("args error without code: %v", err)
				}
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
