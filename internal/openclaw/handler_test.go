package openclaw

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func testHandler(max int) *Handler {
	return NewHandler(Config{MaxRequestBytes: max, HeapBytes: func() uint64 { return 5<<20 + 100 }, EventsDropped: func() uint64 { return 7 }})
}

// TestHandle: each request type, translated into native ops (a fake
// engine answering them with small pages) and back, reply for reply.
func TestHandle(t *testing.T) {
	for _, tc := range []struct {
		name, req, want string
	}{
		{"health", `{"type":"health"}`,
			`{"type":"health","success":true,"uptime":1234,"activeJobs":1,"totalJobsProcessed":3,"memoryUsageMB":5,"eventsDropped":7}`},
		{"poll a finished job: output across pages, an é split between events, native-only kinds left out", `{"type":"poll","jobId":"done"}`,
			`{"type":"poll","success":true,"jobId":"done","state":"exited","chunks":[{"seq":1,"ts":1002,"kind":"stdout","data":"caf"},{"seq":2,"ts":1003,"kind":"stderr","data":"err\n"},{"seq":3,"ts":1004,"kind":"stdout","data":"é ok\n"}],"cursor":6,"exitCode":3,"exitSignal":null,"terminationReason":"exit"}`},
		{"poll from a cursor inside a character: looks back for its start", `{"type":"poll","jobId":"done","cursor":3}`,
			`{"type":"poll","success":true,"jobId":"done","state":"exited","chunks":[{"seq":3,"ts":1004,"kind":"stdout","data":"é ok\n"}],"cursor":6,"exitCode":3,"exitSignal":null,"terminationReason":"exit"}`},
		{"poll past the end: the job's next seq", `{"type":"poll","jobId":"done","cursor":100}`,
			`{"type":"poll","success":true,"jobId":"done","state":"exited","chunks":[],"cursor":6,"exitCode":3,"exitSignal":null,"terminationReason":"exit"}`},
		{"poll a negative cursor: from 0", `{"type":"poll","jobId":"late","cursor":-5}`,
			`{"type":"poll","success":true,"jobId":"late","state":"failed","chunks":[],"cursor":2,"exitCode":null,"exitSignal":"SIGTERM","terminationReason":"timeout"}`},
		{"poll a running job flushes its merge window first", `{"type":"poll","jobId":"run","cursor":0}`,
			`{"type":"poll","success":true,"jobId":"run","state":"running","chunks":[{"seq":1,"ts":1002,"kind":"stdout","data":"a"},{"seq":2,"ts":1003,"kind":"stdout","data":"b"}],"cursor":3}`},
		{"poll an unknown job", `{"type":"poll","jobId":"nope","cursor":0}`,
			`{"type":"poll","success":false,"jobId":"nope","state":"failed","chunks":[],"cursor":0,"error":"Job not found"}`},
		{"poll without a job id", `{"type":"poll"}`,
			`{"type":"poll","success":false,"jobId":"","state":"failed","chunks":[],"cursor":0,"error":"jobId is required"}`},
		{"spawn", `{"type":"spawn","jobId":"new1","command":"echo hi","env":{"A":"1"},"timeoutMs":500,"usePty":true,"maxOutputBytes":10}`,
			`{"type":"spawn","success":true,"jobId":"new1","pid":4242}`},
		{"spawn a known id", `{"type":"spawn","jobId":"done","command":"true"}`,
			`{"type":"spawn","success":false,"jobId":"done","error":"Job already exists"}`},
		{"spawn past the job limit", `{"type":"spawn","jobId":"new1","command":"true"}`, ""}, // (see below)
		{"spawn without a command", `{"type":"spawn","jobId":"x"}`,
			`{"type":"spawn","success":false,"jobId":"x","error":"command is required"}`},
		{"spawn without a job id", `{"type":"spawn","command":"true"}`,
			`{"type":"spawn","success":false,"error":"jobId is required"}`},
		{"spawn an id the supervisor refuses", `{"type":"spawn","jobId":"a/b","command":"true"}`, ""},
		{"kill", `{"type":"kill","jobId":"run","signal":"SIGKILL"}`, `{"type":"kill","success":true,"jobId":"run"}`},
		{"kill a finished job", `{"type":"kill","jobId":"done"}`, `{"type":"kill","success":true,"jobId":"done"}`},
		{"kill an unknown job", `{"type":"kill","jobId":"nope"}`, `{"type":"kill","success":false,"jobId":"nope","error":"Job not found"}`},
		{"kill with a signal nobody knows", `{"type":"kill","jobId":"run","signal":"SIGNOPE"}`, ""},
		{"status of a job", `{"type":"status","jobId":"done"}`,
			`{"type":"status","success":true,"job":{"jobId":"done","state":"exited","pid":10,"startedAtMs":501,"exitCode":3,"exitSignal":null,"terminationReason":"exit","outputBytes":13}}`},
		{"status of every job, in spawn order, across pages", `{"type":"status"}`,
			`{"type":"status","success":true,"jobs":[` +
				`{"jobId":"done","state":"exited","pid":10,"startedAtMs":501,"exitCode":3,"exitSignal":null,"terminationReason":"exit","outputBytes":13},` +
				`{"jobId":"run","state":"running","pid":11,"startedAtMs":601,"exitCode":null,"exitSignal":null,"outputBytes":0},` +
				`{"jobId":"late","state":"failed","pid":12,"startedAtMs":701,"exitCode":null,"exitSignal":"SIGTERM","terminationReason":"timeout","outputBytes":0}]}`},
		{"status of an unknown job", `{"type":"status","jobId":"nope"}`, `{"type":"status","success":false,"error":"Job not found"}`},
		{"subscribe from 0: events as published, seqs from 0", `{"type":"subscribe","jobId":"done","fromSeq":0}`,
			`{"type":"subscribe","success":true,"jobId":"done","currentSeq":5,"events":[` +
				`{"kind":"job.started","jobId":"done","seq":0,"ts":1000,"pid":10,"command":"echo hi"},` +
				`{"kind":"job.stdout","jobId":"done","seq":1,"ts":1002,"data":"caf"},` +
				`{"kind":"job.stderr","jobId":"done","seq":2,"ts":1003,"data":"err\n"},` +
				`{"kind":"job.stdout","jobId":"done","seq":3,"ts":1004,"data":"é ok\n"},` +
				`{"kind":"job.exited","jobId":"done","seq":5,"ts":2000,"exitCode":3,"exitSignal":null,"reason":"exit"}]}`},
		{"subscribe from a seq", `{"type":"subscribe","jobId":"done","fromSeq":3}`,
			`{"type":"subscribe","success":true,"jobId":"done","currentSeq":5,"events":[` +
				`{"kind":"job.stdout","jobId":"done","seq":3,"ts":1004,"data":"é ok\n"},` +
				`{"kind":"job.exited","jobId":"done","seq":5,"ts":2000,"exitCode":3,"exitSignal":null,"reason":"exit"}]}`},
		{"subscribe a timed-out job", `{"type":"subscribe","jobId":"late"}`,
			`{"type":"subscribe","success":true,"jobId":"late","currentSeq":1,"events":[` +
				`{"kind":"job.started","jobId":"late","seq":0,"ts":1000,"pid":12,"command":""},` +
				`{"kind":"job.failed","jobId":"late","seq":1,"ts":2000,"error":"timeout","reason":"timeout"}]}`},
		{"subscribe an unknown job", `{"type":"subscribe","jobId":"nope"}`, `{"type":"subscribe","success":false,"jobId":"nope","error":"Job not found"}`},
		{"list-jobs: the jobs not ended", `{"type":"list-jobs"}`,
			`{"type":"list-jobs","success":true,"jobs":[{"jobId":"run","state":"running","lastSeq":1,"startedAtMs":601}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			h := testHandler(0)
			switch {
			case strings.Contains(tc.name, "past the job limit"):
				f.maxJobs = len(f.jobs)
				got := decodeReply(t, h.Handle(f, []byte(tc.req)))
				if got["success"] != false || got["error"] != "Max concurrent jobs reached (3 jobs are running)" {
					t.Fatalf("reply %v", got)
				}
				return
			case tc.want == "":
				got := decodeReply(t, h.Handle(f, []byte(tc.req)))
				if got["success"] != false || got["error"] == "" || got["type"] != decodeReply(t, []byte(tc.req))["type"] {
					t.Fatalf("reply %v: want a refusal of that type with an error", got)
				}
				t.Logf("%s: %v", tc.name, got["error"])
				return
			}
			if got := string(h.Handle(f, []byte(tc.req))); got != tc.want {
				t.Fatalf("request %s\n got %s\nwant %s", tc.req, got, tc.want)
			}
		})
	}
}

// TestHandleNativeArgs: what the dialect asks of the native protocol.
func TestHandleNativeArgs(t *testing.T) {
	f := newFake(t)
	f.maxJobs = 100
	h := testHandler(0)
	spawnArgs := func(req string) protocol.SpawnArgs {
		t.Helper()
		f.asked = nil
		if got := decodeReply(t, h.Handle(f, []byte(req))); got["success"] != true {
			t.Fatalf("%s: %v", req, got)
		}
		return f.asked[0].args.(protocol.SpawnArgs)
	}
	a := spawnArgs(`{"type":"spawn","jobId":"s1","command":"echo $A; sleep 1","cwd":"/tmp","env":{"A":"1"}}`)
	if a.JobID != "s1" || strings.Join(a.Argv, "|") != "/bin/bash|-c|echo $A; sleep 1" || a.Cwd != "/tmp" || a.Env["A"] != "1" || a.EnvMode != "" {
		t.Fatalf("spawn args %+v", a)
	}
	for _, tc := range []struct {
		fields                     string
		timeoutMs, noOutputTimeout int64
	}{
		{``, 0, 0}, // the supervisor's default timeout
		{`,"timeoutMs":null,"noOutputTimeoutMs":null`, 0, 0},
		{`,"timeoutMs":500,"noOutputTimeoutMs":250`, 500, 250},
		{`,"timeoutMs":0`, protocol.MaxTimeoutMs, 0}, // no timeout: the longest there is
		{`,"timeoutMs":-1,"noOutputTimeoutMs":-1`, protocol.MaxTimeoutMs, 0},
		{`,"timeoutMs":1e12,"noOutputTimeoutMs":9007199254740991`, protocol.MaxTimeoutMs, protocol.MaxTimeoutMs},
		{`,"timeoutMs":5.0`, 5, 0},
	} {
		a := spawnArgs(`{"type":"spawn","jobId":"t` + string(rune('a'+len(f.jobs))) + `","command":"true"` + tc.fields + `}`)
		if a.TimeoutMs != tc.timeoutMs || a.NoOutputTimeoutMs != tc.noOutputTimeout {
			t.Errorf("%s: timeoutMs %d noOutputTimeoutMs %d, want %d %d", tc.fields, a.TimeoutMs, a.NoOutputTimeoutMs, tc.timeoutMs, tc.noOutputTimeout)
		}
	}

	f.asked = nil
	h.Handle(f, []byte(`{"type":"poll","jobId":"done","cursor":0}`))
	for i, q := range f.asked {
		a := q.args.(protocol.SubscribeArgs)
		if a.Flush != (i == 0) {
			t.Fatalf("poll's native subscribe %d: flush %v (only the first flushes)", i, a.Flush)
		}
	}
	f.asked = nil
	h.Handle(f, []byte(`{"type":"subscribe","jobId":"done"}`))
	for _, q := range f.asked {
		if q.args.(protocol.SubscribeArgs).Flush {
			t.Fatal("subscribe flushed the merge window (only poll does)")
		}
	}
	f.asked = nil
	h.Handle(f, []byte(`{"type":"kill","jobId":"run"}`))
	if a := f.asked[0].args.(protocol.KillArgs); a.Signal != "" {
		t.Fatalf("kill without a signal asked for %q: the native kill path (TERM, grace, KILL) is wanted", a.Signal)
	}
}

// TestHandleBadRequests: whatever arrives gets one JSON reply, typed
// "health" with success false and an error saying why, and nothing runs.
func TestHandleBadRequests(t *testing.T) {
	deep := `{"type":"health","x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
	for _, tc := range []struct {
		name, req, errHas string
	}{
		{"truncated", `{`, "malformed JSON"},
		{"not JSON", `{type: health}`, "malformed JSON"},
		{"trailing garbage", `{"type":"health"} {}`, "malformed JSON"},
		{"an array", `{"type":"health"}]`, "malformed JSON"},
		{"no type", `{}`, "no type"},
		{"unknown type", `{"type":"write","jobId":"run"}`, `unknown request type "write"`},
		{"type of the wrong type", `{"type":7}`, "malformed JSON"},
		{"jobId of the wrong type", `{"type":"poll","jobId":5}`, "malformed JSON"},
		{"env of the wrong type", `{"type":"spawn","jobId":"x","command":"true","env":{"A":1}}`, "malformed JSON"},
		{"env not a map", `{"type":"spawn","jobId":"x","command":"true","env":["A=1"]}`, "malformed JSON"},
		{"cursor not an integer", `{"type":"poll","jobId":"done","cursor":1.5}`, "not an integer"},
		{"cursor a string", `{"type":"poll","jobId":"done","cursor":"3"}`, "not an integer"},
		{"cursor too large", `{"type":"poll","jobId":"done","cursor":1e300}`, "not an integer"},
		{"deep nesting", deep, "malformed JSON"},
		{"not UTF-8", "{\"type\":\"spawn\",\"jobId\":\"x\",\"command\":\"echo \xff\"}", "not valid UTF-8"},
		{"too large", `{"type":"spawn","jobId":"x","command":"` + strings.Repeat("a", 5000) + `"}`, "the limit is 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			max := 0
			if tc.name == "too large" {
				max = 4096
			}
			got := decodeReply(t, testHandler(max).Handle(f, []byte(tc.req)))
			if got["type"] != "health" || got["success"] != false || !strings.Contains(got["error"].(string), tc.errHas) {
				t.Fatalf("reply %v, want type health, success false, an error with %q", got, tc.errHas)
			}
			for _, k := range []string{"uptime", "activeJobs", "totalJobsProcessed", "memoryUsageMB"} {
				if _, ok := got[k]; !ok {
					t.Fatalf("reply %v has no %s (the Node server's shape)", got, k)
				}
			}
			if len(f.asked) > 0 {
				t.Fatalf("a bad request ran native ops: %v", f.ops())
			}
		})
	}
	// Extra fields, and the ignored ones of any type: a normal reply.
	f := newFake(t)
	got := decodeReply(t, testHandler(0).Handle(f, []byte(`{"type":"health","extra":{"a":[1,2,{"b":null}]},"usePty":"yes","maxOutputBytes":[]}`)))
	if got["success"] != true {
		t.Fatalf("extra fields: %v", got)
	}
	// A huge command is refused by the native limits, with their reason.
	got = decodeReply(t, testHandler(0).Handle(f, []byte(`{"type":"spawn","jobId":"big","command":"`+strings.Repeat("a", 300<<10)+`"}`)))
	if got["success"] != false || !strings.Contains(got["error"].(string), "limit") {
		t.Fatalf("a 300 KiB command: %v", got)
	}
}

func decodeReply(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("reply is not a JSON object: %v\n%s", err, b)
	}
	return m
}

// FuzzHandle: whatever the body, Handle answers one JSON object with a
// type and a success flag, and never panics.
func FuzzHandle(f *testing.F) {
	for _, s := range []string{
		`{"type":"health"}`, `{"type":"poll","jobId":"done","cursor":3}`, `{"type":"spawn","jobId":"n","command":"x","env":{"A":"1"}}`,
		`{"type":"subscribe","jobId":"run","fromSeq":-1}`, `{"type":"status"}`, `{"type":"kill","jobId":"run","signal":"9"}`,
		`{"type":"list-jobs"}`, `{`, `{"type":[]}`, "{\"type\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fn := newFake(t)
		rep := testHandler(4096).Handle(fn, body)
		var m map[string]any
		if err := json.Unmarshal(rep, &m); err != nil {
			t.Fatalf("body %q: reply %q is not a JSON object: %v", body, rep, err)
		}
		if _, ok := m["type"].(string); !ok {
			t.Fatalf("body %q: reply %s has no type", body, rep)
		}
		if _, ok := m["success"].(bool); !ok {
			t.Fatalf("body %q: reply %s has no success", body, rep)
		}
	})
}
