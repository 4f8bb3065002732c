package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp/zmq4peer"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// rawCallBytes sends one body over a fresh DEALER (REQ envelope) and
// returns the reply's body as it came.
func rawCallBytes(t *testing.T, ts *testServer, body []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := zmq4peer.DialToken(ctx, zmq4peer.Dealer, ts.cfg.Control, 2*time.Second, ts.token)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(zmq4peer.NewMsg(nil, body)); err != nil {
		t.Fatal(err)
	}
	ch := make(chan []byte, 1)
	go func() {
		if m, err := s.Recv(); err == nil {
			ch <- m.Frames[len(m.Frames)-1]
		}
		close(ch)
	}()
	select {
	case b, ok := <-ch:
		if !ok {
			t.Fatal("no reply")
		}
		return b
	case <-ctx.Done():
		t.Fatal("no reply")
	}
	return nil
}

// strsUTF8 fails unless every msgpack str in b (decoded generically:
// str as string, bin as []byte) is valid UTF-8, as strict clients
// (Python's msgpack with raw=False) require.
func strsUTF8(t *testing.T, what string, b []byte) {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case string:
			if !utf8.ValidString(x) {
				t.Fatalf("%s: the str at %s is not UTF-8: %q", what, path, x)
			}
		case []any:
			for i, e := range x {
				walk(e, fmt.Sprintf("%s[%d]", path, i))
			}
		case map[string]any:
			for k, e := range x {
				walk(k, path+" key")
				walk(e, path+"."+k)
			}
		}
	}
	walk(v, "")
}

// TestInvalidUTF8RequestRefused: a spawn whose argv (or label, pty term,
// id...) is not UTF-8 is refused with bad-request naming the field,
// through a real socket, whether it came as a str or as a bin; no job is
// made of it, and status, list-jobs and job.started stay decodable by
// strict clients for everyone.
func TestInvalidUTF8RequestRefused(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ok, err := ts.client.Spawn(ctxT(t, 10*time.Second), protocol.SpawnArgs{Argv: []string{"/bin/echo", "héllo"}, Labels: map[string]string{"team": "ø"}})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, ts.client, ok.JobID, 10*time.Second)
	const bad = "x\xff\xfey"
	envelope := func(id string, args map[string]any) []byte {
		a, _ := protocol.Marshal(args)
		b, _ := protocol.Marshal(map[string]any{"v": protocol.Version, "id": id, "op": "spawn", "args": msgpack.RawMessage(a)})
		return b
	}
	for _, tc := range []struct {
		name, id string
		args     map[string]any
		want     string
	}{
		{"argv str", "r1", map[string]any{"argv": []string{"/bin/echo", bad}}, "argv[1] is not valid UTF-8"},
		{"argv bin", "r2", map[string]any{"argv": [][]byte{[]byte("/bin/echo"), []byte(bad)}}, "argv[1] is not valid UTF-8"},
		{"label", "r3", map[string]any{"argv": []string{"/bin/true"}, "labels": map[string]string{"team": bad}}, `labels["team"] is not valid UTF-8`},
		{"pty term", "r4", map[string]any{"argv": []string{"/bin/true"}, "pty": map[string]any{"term": bad}}, "pty.term is not valid UTF-8"},
		{"cwd", "r5", map[string]any{"argv": []string{"/bin/true"}, "cwd": "/tmp/" + bad}, "cwd is not valid UTF-8"},
		{"env", "r6", map[string]any{"argv": []string{"/bin/true"}, "env": map[string]string{bad: "1"}}, "env key"},
		{"id", "id-" + bad, map[string]any{"argv": []string{"/bin/true"}}, "id is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := rawCallBytes(t, ts, envelope(tc.id, tc.args))
			strsUTF8(t, "reply", raw)
			rep, err := protocol.DecodeReply(raw)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || rep.Error == nil || rep.Error.Code != protocol.CodeBadRequest || !strings.Contains(rep.Error.Message, tc.want) {
				t.Fatalf("want bad-request mentioning %q, got %+v", tc.want, rep.Error)
			}
			if utf8.ValidString(tc.id) && rep.ID != tc.id {
				t.Fatalf("reply id %q, want %q", rep.ID, tc.id)
			}
		})
	}
	// Only the good job is known; what everyone reads decodes strictly.
	list, _ := protocol.EncodeRequest("l", protocol.OpListJobs, &protocol.ListJobsArgs{})
	raw := rawCallBytes(t, ts, list)
	strsUTF8(t, "list-jobs", raw)
	rep, err := protocol.DecodeReply(raw)
	if err != nil || !rep.OK {
		t.Fatalf("list-jobs: %+v %v", rep, err)
	}
	var lr protocol.ListJobsResult
	if err := rep.DecodeResult(&lr); err != nil || len(lr.Jobs) != 1 || lr.Jobs[0].JobID != ok.JobID {
		t.Fatalf("list-jobs: %+v %v; want only %s", lr.Jobs, err, ok.JobID)
	}
	st, _ := protocol.EncodeRequest("s", protocol.OpStatus, &protocol.JobArgs{JobID: ok.JobID})
	strsUTF8(t, "status", rawCallBytes(t, ts, st))
	sub, _ := protocol.EncodeRequest("b", protocol.OpSubscribe, &protocol.SubscribeArgs{JobID: ok.JobID, FromSeq: 1})
	strsUTF8(t, "subscribe (job.started...)", rawCallBytes(t, ts, sub))
}
