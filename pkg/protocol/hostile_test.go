package protocol

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// hostileInputs are messages a broken or hostile peer could send: a few
// bytes declaring gigabytes. Before checkValue, each generic decode of one
// grew the pooled msgpack decoder's buffer by a quarter towards the
// declared length (kept across calls: some hundred replies of six bytes
// took a client to 14 GB), or preallocated a typed slice of the declared
// element count ("fatal error: out of memory" for 49 bytes).
var hostileInputs = []struct {
	name, want string // want: in the error
	decode     func([]byte) error
	b          []byte
}{
	// The family the fuzzer found (its input was "\x84\xdb0000"): a
	// reply whose first key claims to be a str of 4 GiB.
	{"reply key str32", "only 5 bytes follow", decodeReply, []byte("\x84\xdb\xff\xff\xff\xff")},
	{"reply result ext32", "only 5 bytes follow", decodeReply, []byte("\x84\xa6result\x84\xc90000")},
	{"reply id ext32", "ext", decodeReply, []byte("\x81\xa2id\xc9\x00\x00\x00\x01\x01\x00")},
	{"reply id bin32", "only 0 bytes follow", decodeReply, []byte("\x81\xa2id\xc6\xff\xff\xff\xff")},
	{"reply error details map32", "only 0 bytes follow", decodeReply, []byte("\x82\xa2ok\xc2\xa5error\x81\xa7details\xdf\xff\xff\xff\xff")},
	// An ext-wrapped map: the generic decoder reads the labels map from
	// inside the ext, then the result's next key, "events", from the
	// ext's bytes too: 4 Gi events of 88 bytes preallocated.
	{"subscribe result misaligned by ext", "ext", decodeSubscribe, []byte("\x82\xa3job\x81\xa6labels\xc7\x0d\x01\x80\xa6events\xdd\xff\xff\xff\xff\xa6events\x01")},
	{"subscribe result events array32", "only 0 bytes follow", decodeSubscribe, []byte("\x81\xa6events\xdd\xff\xff\xff\xff")},
	{"request key str32", "only 5 bytes follow", decodeRequest, []byte("\x84\xdb\xff\xff\xff\xff")},
	{"spawn args argv array32", "at most 4096", decodeSpawnArgs, []byte("\x84\xa1v\x02\xa2op\xa5spawn\xa4args\x81\xa4argv\xdd\x0f\xff\xff\xff")},
	{"event kind str32", "only 0 bytes follow", decodeEvent, []byte("\x81\xa4kind\xdb\xff\xff\xff\xff")},
	{"output data bin32", "only 0 bytes follow", decodeOutput, []byte("\x81\xa4data\xc6\xff\xff\xff\xff")},
	{"deep nesting", "nest more than", decodeReply, append(bytes.Repeat([]byte{0x91}, 5000), 0xc0)},
}

func decodeReply(b []byte) error {
	r, err := DecodeReplyNoCopy(b)
	if err == nil && r.OK {
		_, err = DecodeSubscribeResult(r.Result)
	}
	return err
}

func decodeSubscribe(b []byte) error { _, err := DecodeSubscribeResult(b); return err }

func decodeRequest(b []byte) error { _, err := DecodeRequest(b, 0); return err }

func decodeSpawnArgs(b []byte) error {
	req, err := DecodeRequest(b, 0)
	if err != nil {
		return err
	}
	return DecodeArgs(req, &SpawnArgs{})
}

func decodeEvent(b []byte) error { _, err := DecodeEventNoCopy(b); return err }

func decodeOutput(b []byte) error {
	_, err := (&Event{Kind: KindStdout, Payload: b}).Output()
	return err
}

// TestHostileLengthsAreRefusedCheaply: every decoder refuses a message
// declaring more than it holds with a clear CodeBadRequest error, and a
// hundred such messages in a row allocate next to nothing (the damage was
// cumulative: the pooled decoder kept its grown buffer).
func TestHostileLengthsAreRefusedCheaply(t *testing.T) {
	const calls = 100
	for _, tc := range hostileInputs {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode(tc.b)
			code := CodeBadRequest
			if strings.HasPrefix(tc.want, "at most") {
				code = CodeTooLarge // (requests: a bound on element counts)
			}
			if err == nil || CodeOf(err) != code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a %s error mentioning %q, got %v", code, tc.want, err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range calls {
				_ = tc.decode(tc.b)
			}
			runtime.ReadMemStats(&after)
			// An error costs a few hundred bytes; a single decode of
			// any of these used to cost a megabyte or more.
			if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
				t.Fatalf("%d decodes allocated %d bytes (%d each); want < 1 MiB in all", calls, d, d/calls)
			}
		})
	}
}

// TestCheckValue: what checkValue lets through and what it refuses.
func TestCheckValue(t *testing.T) {
	ok := [][]byte{
		{0xc0}, {0x00}, {0xff}, {0xc3},
		{0xa1, 'x'}, {0xd9, 0x01, 'x'}, {0xc4, 0x00}, {0xcb, 0, 0, 0, 0, 0, 0, 0, 0},
		{0x92, 0x01, 0x92, 0x02, 0x03}, {0x82, 0xa1, 'a', 0x90, 0xa1, 'b', 0x80},
		{0xdc, 0x00, 0x01, 0xc0}, {0xdf, 0, 0, 0, 1, 0xa0, 0xc0},
		{0x91, 0x01, 0xc1}, // trailing bytes are not looked at
		append(bytes.Repeat([]byte{0x91}, maxNesting), 0xc0),
		mustMarshal(SubscribeResult{Events: []Event{NewOutputEvent("j", 1, 2, KindStdout, 3, []byte("hi"))}}),
	}
	for _, b := range ok {
		if err := checkValue(b); err != nil {
			t.Errorf("%x: %v", b, err)
		}
	}
	bad := [][]byte{
		nil, {0xc1}, {0x92, 0x01}, {0xa2, 'x'}, {0xd9}, {0xda, 0x00}, {0xcd, 0x01},
		{0xd4, 0x01, 0x02}, {0xc7, 0x00, 0x01}, {0x91, 0xd8},
		{0xdd, 0xff, 0xff, 0xff, 0xff}, {0xdf, 0x80, 0, 0, 0, 0xc0, 0xc0},
		append(bytes.Repeat([]byte{0x81, 0xc0}, maxNesting+1), 0xc0),
	}
	for _, b := range bad {
		if err := checkValue(b); err == nil {
			t.Errorf("%x was accepted", b)
		}
	}
}

// TestRequestElementBound: a request whose arrays or maps are within its
// bytes but hold more than MaxArgs elements is refused (too-large) before
// the generic decoder allocates a typed element for each: 1 MiB of nils
// as argv would otherwise cost ~34 MiB.
func TestRequestElementBound(t *testing.T) {
	body := func(key string, code byte, n int, elem []byte) []byte {
		b := []byte("\x84\xa1v\x02\xa2id\xa1x\xa2op\xa5spawn\xa4args\x81")
		b = append(b, byte(0xa0|len(key)))
		b = append(b, key...)
		b = append(b, code, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		for range n {
			b = append(b, elem...)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"argv of nils", body("argv", 0xdd, 1<<20-64, []byte{0xc0})},
		{"env of empty strings", body("env", 0xdf, 300000, []byte{0xa1, 'k', 0xa0})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			req, err := DecodeRequest(tc.b, 0)
			if err == nil {
				var a SpawnArgs
				err = DecodeArgs(req, &a)
			}
			runtime.ReadMemStats(&after)
			if CodeOf(err) != CodeTooLarge || !strings.Contains(err.Error(), "at most 4096") {
				t.Fatalf("got %v; want too-large", err)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
				t.Fatalf("refusing a %d-byte request allocated %d bytes", len(tc.b), grew)
			}
		})
	}
	// At the bound: accepted.
	ok := body("argv", 0xdd, MaxArgs, []byte{0xa1, 'a'})
	req, err := DecodeRequest(ok, 0)
	if err != nil {
		t.Fatal(err)
	}
	var a SpawnArgs
	if err := DecodeArgs(req, &a); err != nil || len(a.Argv) != MaxArgs {
		t.Fatalf("argv of %d: %v (%d decoded)", MaxArgs, err, len(a.Argv))
	}
}

// TestBigListsOfTinyElements: a reply whose list of jobs is a million
// nils (1 MiB, all within its bytes) is refused before the generic
// decoder allocates a JobInfo for each (847 MiB before); a real list of
// more than 4096 jobs still decodes.
func TestBigListsOfTinyElements(t *testing.T) {
	n := 1<<20 - 64
	b := []byte("\x82\xa2ok\xc3\xa6result\x81\xa4jobs\xdd")
	b = append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	b = append(b, bytes.Repeat([]byte{0xc0}, n)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rep, err := DecodeReply(b)
	if err == nil {
		var r ListJobsResult
		err = rep.DecodeResult(&r)
	}
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "at least 32 bytes each") {
		t.Fatalf("got %v; want the list refused", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Fatalf("refusing a %d-byte reply allocated %d bytes", len(b), grew)
	}

	jobs := make([]JobInfo, 5000)
	for i := range jobs {
		jobs[i] = JobInfo{JobID: fmt.Sprintf("j-%016x", i), State: StateExited, Argv: []string{"true"}}
	}
	ok, err := OKReply("1", ListJobsResult{Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = DecodeReply(ok)
	if err != nil {
		t.Fatal(err)
	}
	var r ListJobsResult
	if err := rep.DecodeResult(&r); err != nil || len(r.Jobs) != 5000 {
		t.Fatalf("a real list of 5000 jobs: %v (%d decoded)", err, len(r.Jobs))
	}
}
