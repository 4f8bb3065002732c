package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestInvalidUTF8Refused: a string that is not UTF-8, anywhere in a
// request, as a str or as a bin decoded into a string field, is refused
// with bad-request naming the field, the same way whichever decoder
// (hand-written or generic) reads it; nothing that is not UTF-8 is ever
// handed on to be kept and echoed.
func TestInvalidUTF8Refused(t *testing.T) {
	const bad = "a\xffb" // (\xff never occurs in UTF-8)
	badBin := []byte(bad)
	argv := []string{"/bin/echo", "x"}
	for _, tc := range []struct {
		name string
		op   Op
		args map[string]any
		want string // in the message
	}{
		{"argv str", OpSpawn, map[string]any{"argv": []string{"/bin/echo", bad}}, `argv[1] is not valid UTF-8 ("a\xffb")`},
		{"argv bin", OpSpawn, map[string]any{"argv": [][]byte{[]byte("/bin/echo"), badBin}}, "argv[1] is not valid UTF-8"},
		{"shell", OpSpawn, map[string]any{"shell": "echo " + bad}, "shell is not valid UTF-8"},
		{"shell bin", OpSpawn, map[string]any{"shell": badBin}, "shell is not valid UTF-8"},
		{"cwd", OpSpawn, map[string]any{"argv": argv, "cwd": "/tmp/" + bad}, "cwd is not valid UTF-8"},
		{"env value", OpSpawn, map[string]any{"argv": argv, "env": map[string]string{"K": bad}}, `env["K"] is not valid UTF-8`},
		{"env key", OpSpawn, map[string]any{"argv": argv, "env": map[string]string{"K" + bad: "v"}}, `env key "Ka\xffb" is not valid UTF-8`},
		{"env value bin", OpSpawn, map[string]any{"argv": argv, "env": map[string][]byte{"K": badBin}}, `env["K"] is not valid UTF-8`},
		{"envMode", OpSpawn, map[string]any{"argv": argv, "envMode": bad}, "envMode is not valid UTF-8"},
		{"label value", OpSpawn, map[string]any{"argv": argv, "labels": map[string]string{"team": bad}}, `labels["team"] is not valid UTF-8`},
		{"label key", OpSpawn, map[string]any{"argv": argv, "labels": map[string]string{bad: "x"}}, `labels key "a\xffb" is not valid UTF-8`},
		{"sessionId", OpSpawn, map[string]any{"argv": argv, "sessionId": bad}, "sessionId is not valid UTF-8"},
		// pty: the generic decoder reads these args.
		{"pty term (generic)", OpSpawn, map[string]any{"argv": argv, "pty": map[string]any{"term": bad}}, "pty.term is not valid UTF-8"},
		{"argv with pty (generic)", OpSpawn, map[string]any{"argv": []string{bad}, "pty": map[string]any{}}, "argv[0] is not valid UTF-8"},
		{"unknown key's value", OpSpawn, map[string]any{"argv": argv, "x-extra": bad}, "the str at byte"},
		{"unknown key", OpSpawn, map[string]any{"argv": argv, bad: 1}, "the str at byte"},
		{"kill jobId", OpKill, map[string]any{"jobId": "j-" + bad}, "jobId is not valid UTF-8"},
		{"kill signal", OpKill, map[string]any{"jobId": "j-1", "signal": bad}, "signal is not valid UTF-8"},
		{"list-jobs sessionId", OpListJobs, map[string]any{"sessionId": bad}, "sessionId is not valid UTF-8"},
		{"write data as str", OpWrite, map[string]any{"jobId": "j-1", "data": bad}, "the str at byte"},
		{"health with args", OpHealth, map[string]any{"x": bad}, "the str at byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeRequest("r1", tc.op, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			req, err := DecodeRequest(b, 0)
			if err != nil {
				t.Fatalf("envelope refused: %v", err)
			}
			v := argsFor(tc.op)
			err = DecodeArgs(req, v)
			if CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want bad-request mentioning %q", err, tc.want)
			}
			if !utf8.ValidString(err.Error()) {
				t.Fatalf("the message is not UTF-8 itself: %q", err.Error())
			}
			// The generic decoder alone says the same.
			gerr := decodeRequestValue(req.Args, argsFor(tc.op), string(tc.op)+" args")
			if gerr == nil || gerr.Error() != err.Error() {
				t.Fatalf("generic decoder: %v; DecodeArgs: %v", gerr, err)
			}
			if tc.op == OpSpawn && fastSpawnArgs(req.Args, &SpawnArgs{}) {
				t.Fatal("the fast spawn decoder accepted it")
			}
			// And the same args in a generic envelope (a duplicate key
			// sends the envelope there): args are still named by DecodeArgs.
			w := newMW(nil)
			w.int("v", Version, false)
			w.int("v", Version, false)
			w.str("id", "r1", false)
			w.str("op", string(tc.op), false)
			w.raw("args", req.Args, false)
			req2, err2 := DecodeRequest(w.end(), 0)
			if err2 != nil {
				t.Fatalf("generic envelope refused: %v", err2)
			}
			if err2 = DecodeArgs(req2, argsFor(tc.op)); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("through the generic envelope: %v", err2)
			}
		})
	}
	// Bytes that are not UTF-8 are fine where the protocol takes bytes.
	b, _ := EncodeRequest("r1", OpWrite, map[string]any{"jobId": "j-1", "data": badBin})
	req, err := DecodeRequest(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	var w WriteArgs
	if err := DecodeArgs(req, &w); err != nil || string(w.Data) != bad {
		t.Fatalf("write data as bin: %v %q", err, w.Data)
	}
}

func argsFor(op Op) any {
	switch op {
	case OpSpawn:
		return &SpawnArgs{}
	case OpKill:
		return &KillArgs{}
	case OpListJobs:
		return &ListJobsArgs{}
	case OpWrite:
		return &WriteArgs{}
	}
	return &struct{}{} // (as DecodeArgs checks an op without args)
}

// TestInvalidUTF8Envelope: an id, op or other envelope str that is not
// UTF-8 is refused by both decoders, and such an id is never echoed (not
// even by the reply to a request too large to decode).
func TestInvalidUTF8Envelope(t *testing.T) {
	const bad = "\xc3(" // (a truncated two-byte sequence)
	for _, tc := range []struct {
		name   string
		fields []any
		want   string
	}{
		{"id", []any{"v", Version, "id", bad, "op", "health"}, "id is not valid UTF-8"},
		{"op", []any{"v", Version, "id", "r1", "op", "he" + bad}, "op is not valid UTF-8"},
		{"unknown key", []any{"v", Version, "id", "r1", "op", "health", "trace", bad}, "the str at byte"},
		{"id as bin", []any{"v", Version, "id", []byte(bad), "op", "health"}, "id is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newMW(nil)
			for i := 0; i < len(tc.fields); i += 2 {
				w.key(tc.fields[i].(string))
				v, _ := Marshal(tc.fields[i+1])
				w.b = append(w.b, v...)
			}
			b := w.end()
			if _, ok := fastRequest(b); ok {
				t.Fatal("the fast request decoder accepted it")
			}
			req, err := DecodeRequest(b, 0)
			if CodeOf(err) != CodeBadRequest || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want bad-request mentioning %q", err, tc.want)
			}
			if req != nil && !utf8.ValidString(req.ID) {
				t.Fatalf("id %q would be echoed", req.ID)
			}
		})
	}
	big := append([]byte("\x82\xa2id\xa2"+bad+"\xa4args\xc6\x00\x10\x00\x00"), make([]byte, 1<<20)...)
	if req, err := DecodeRequest(big, 0); CodeOf(err) != CodeTooLarge || req.ID != "" {
		t.Fatalf("too large, with an id that is not UTF-8: %+v %v; want too-large, no id", req, err)
	}
}

// TestErrorReplyIsUTF8: an error whose message or details quote bytes
// that are not UTF-8 goes out as valid UTF-8.
func TestErrorReplyIsUTF8(t *testing.T) {
	e := Errorf(CodeSpawnError, "exec %s: no such file", "/x/\xff")
	e.Details = map[string]string{"path\xfe": "\xff"}
	r, err := DecodeReply(ErrorReply("id\xff", e))
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(r.ID) || !utf8.ValidString(r.Error.Message) || r.Error.Message != "exec /x/\uFFFD: no such file" {
		t.Fatalf("reply %+v %q", r, r.Error.Message)
	}
	for k, v := range r.Error.Details {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			t.Fatalf("details %q: %q", k, v)
		}
	}
	if e.Message != "exec /x/\xff: no such file" {
		t.Fatal("the error itself was changed")
	}
}

// FuzzRequestStringsAreUTF8: whatever a request is, if the supervisor's
// decoders accept it every string they hand on is valid UTF-8.
func FuzzRequestStringsAreUTF8(f *testing.F) {
	for _, args := range []map[string]any{
		{"argv": []string{"a", "b\xff"}}, {"shell": []byte("\xc3(")}, {"labels": map[string]string{"k": "\xe2\x82"}},
		{"env": map[string]string{"\xff": "v"}}, {"argv": []string{"ok"}, "pty": map[string]any{"term": "x\xff"}},
		{"argv": []string{"ok"}, "labels": map[string]string{"k": "héllo"}},
	} {
		b, _ := EncodeRequest("r", OpSpawn, args)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeRequest(b, 0)
		if err != nil {
			if req != nil && !utf8.ValidString(req.ID) {
				t.Fatalf("id %q would be echoed", req.ID)
			}
			return
		}
		if checkUTF8(req, "request") != nil {
			t.Fatalf("request %+v accepted", req)
		}
		var a SpawnArgs
		if DecodeArgs(req, &a) == nil {
			if err := checkUTF8(&a, "spawn args"); err != nil {
				t.Fatalf("spawn args accepted: %v", err)
			}
		}
	})
}
