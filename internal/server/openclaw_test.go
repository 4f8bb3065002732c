package server

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The OpenClaw dialect end to end: a real libzmq REQ client sending JSON
// (testdata/jsonbridge.py on pyzmq) against a supervisor, as OpenClaw's
// gateway client talks to its Node server.

func newJSONServer(t *testing.T, tweak func(*Config)) (*testServer, *jsonClient) {
	t.Helper()
	cfg := testConfig(t)
	if tweak != nil {
		tweak(&cfg)
	}
	ts := startServer(t, cfg)
	return ts, startJSONClient(t, ts)
}

// jobID is a job id unique to the test.
func jobID(t *testing.T, what string) string {
	return fmt.Sprintf("%s-%d", what, time.Now().UnixNano())
}

func wantOK(t *testing.T, rep map[string]any, typ string) {
	t.Helper()
	if rep["type"] != typ || rep["success"] != true {
		t.Fatalf("want a successful %s reply, got %v", typ, rep)
	}
}

func TestOpenClawControl(t *testing.T) {
	ts, c := newJSONServer(t, nil)

	t.Run("health", func(t *testing.T) {
		rep := c.req(map[string]any{"type": "health"})
		wantOK(t, rep, "health")
		for _, k := range []string{"uptime", "activeJobs", "totalJobsProcessed", "memoryUsageMB", "eventsDropped"} {
			v, ok := rep[k].(float64)
			if !ok || v < 0 || v != float64(int64(v)) {
				t.Fatalf("%s = %v: want a non-negative integer (%v)", k, rep[k], rep)
			}
		}
		if rep["activeJobs"] != 0.0 {
			t.Fatalf("activeJobs %v before any job", rep["activeJobs"])
		}
	})

	t.Run("spawn and poll", func(t *testing.T) {
		id := jobID(t, "test-job")
		rep := c.req(map[string]any{"type": "spawn", "jobId": id, "command": "echo hello; echo $OC_VAR", "env": map[string]string{"OC_VAR": "from-env"}})
		wantOK(t, rep, "spawn")
		if rep["jobId"] != id || rep["pid"].(float64) <= 0 {
			t.Fatalf("spawn reply %v", rep)
		}
		end, _ := c.pollUntilEnded(id, 5*time.Second)
		if end["state"] != "exited" || end["terminationReason"] != "exit" || end["exitCode"] != 0.0 || end["exitSignal"] != nil {
			t.Fatalf("poll of an ended echo: %v", end)
		}
		if _, ok := end["exitSignal"]; !ok {
			t.Fatalf("exitSignal left out, want an explicit null: %v", end)
		}
		// The first poll that saw it ended may have come before the
		// output's merge window closed: poll flushes it, so all is there.
		all := c.req(map[string]any{"type": "poll", "jobId": id, "cursor": 0})
		if got := output(all, "stdout"); got != "hello\nfrom-env\n" {
			t.Fatalf("output %q", got)
		}
		// The job's events: job.started (seq 0), output, job.exited: the
		// cursor is the next seq, and polling from it gives nothing.
		cursor := all["cursor"].(float64)
		for _, ch := range all["chunks"].([]any) {
			if s := ch.(map[string]any)["seq"].(float64); s < 1 || s >= cursor {
				t.Fatalf("chunk seq %v outside 1..cursor %v", s, cursor)
			}
		}
		again := c.req(map[string]any{"type": "poll", "jobId": id, "cursor": cursor})
		if len(again["chunks"].([]any)) != 0 || again["cursor"] != cursor {
			t.Fatalf("poll from the cursor: %v", again)
		}
	})

	t.Run("stderr", func(t *testing.T) {
		id := jobID(t, "test-stderr")
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": id, "command": "echo error >&2"}), "spawn")
		c.pollUntilEnded(id, 5*time.Second)
		rep := c.req(map[string]any{"type": "poll", "jobId": id})
		if got := output(rep, "stderr"); got != "error\n" || output(rep, "stdout") != "" {
			t.Fatalf("stderr %q, all %v", got, rep)
		}
	})

	t.Run("duplicate id", func(t *testing.T) {
		id := jobID(t, "test-dup")
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": id, "command": "sleep 1"}), "spawn")
		rep := c.req(map[string]any{"type": "spawn", "jobId": id, "command": "echo test"})
		if rep["success"] != false || !strings.Contains(rep["error"].(string), "already exists") {
			t.Fatalf("second spawn of %s: %v", id, rep)
		}
		c.pollUntilEnded(id, 5*time.Second)
		rep = c.req(map[string]any{"type": "spawn", "jobId": id, "command": "echo test"})
		if rep["success"] != false || !strings.Contains(rep["error"].(string), "already exists") {
			t.Fatalf("spawn of %s after it ended (still known): %v", id, rep)
		}
	})

	t.Run("kill", func(t *testing.T) {
		for _, sig := range []string{"", "SIGKILL"} {
			id := jobID(t, "test-kill")
			wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": id, "command": "sleep 10"}), "spawn")
			eventually(t, 5*time.Second, "the job running", func() bool {
				return c.req(map[string]any{"type": "status", "jobId": id})["job"].(map[string]any)["state"] == "running"
			})
			kill := map[string]any{"type": "kill", "jobId": id}
			if sig != "" {
				kill["signal"] = sig
			}
			killed := time.Now()
			wantOK(t, c.req(kill), "kill")
			end, at := c.pollUntilEnded(id, 5*time.Second)
			t.Logf("kill %q: ended %v after the kill was sent (OpenClaw's bar: 200 ms)", sig, at.Sub(killed))
			want := "SIGTERM"
			if sig != "" {
				want = sig
			}
			if end["state"] != "exited" || end["terminationReason"] != "signal" || end["exitSignal"] != want || end["exitCode"] != nil {
				t.Fatalf("killed with %q: %v", sig, end)
			}
			// Killing a finished job succeeds.
			wantOK(t, c.req(map[string]any{"type": "kill", "jobId": id}), "kill")
		}
		rep := c.req(map[string]any{"type": "kill", "jobId": "no-such-job"})
		if rep["success"] != false || rep["error"] != "Job not found" {
			t.Fatalf("kill of an unknown job: %v", rep)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		id := jobID(t, "test-timeout")
		spawned := time.Now()
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": id, "command": "sleep 10", "timeoutMs": 500}), "spawn")
		end, at := c.pollUntilEnded(id, 5*time.Second)
		t.Logf("timeoutMs 500: ended %v after the spawn was sent (OpenClaw's bar: by 800 ms)", at.Sub(spawned))
		if end["state"] != "failed" || end["terminationReason"] != "timeout" {
			t.Fatalf("timed out: %v", end)
		}
		sub := c.req(map[string]any{"type": "subscribe", "jobId": id})
		evs := sub["events"].([]any)
		last := evs[len(evs)-1].(map[string]any)
		if last["kind"] != "job.failed" || last["reason"] != "timeout" || last["error"] != "timeout" {
			t.Fatalf("terminal event of a timed-out job: %v", last)
		}
	})

	t.Run("exiting", func(t *testing.T) {
		// A job that ignores SIGTERM is exiting until the grace ends
		// (2 s here), then SIGKILLed: the native kill path.
		id := jobID(t, "test-exiting")
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": id, "command": "trap '' TERM; echo ready; sleep 10; :"}), "spawn")
		eventually(t, 5*time.Second, "the job's trap set", func() bool {
			return output(c.req(map[string]any{"type": "poll", "jobId": id}), "") == "ready\n"
		})
		wantOK(t, c.req(map[string]any{"type": "kill", "jobId": id}), "kill")
		if st := c.req(map[string]any{"type": "poll", "jobId": id}); st["state"] != "exiting" {
			t.Fatalf("a job ignoring SIGTERM, right after the kill: %v", st)
		}
		listed, found := c.req(map[string]any{"type": "list-jobs"}), false
		for _, j := range listed["jobs"].([]any) {
			j := j.(map[string]any)
			found = found || j["jobId"] == id && j["state"] == "exiting" && j["lastSeq"] == 1.0
		}
		if !found {
			t.Fatalf("list-jobs during the grace, want %s exiting at seq 1 (its output): %v", id, listed)
		}
		end, _ := c.pollUntilEnded(id, 10*time.Second)
		if end["state"] != "exited" || end["terminationReason"] != "signal" || end["exitSignal"] != "SIGKILL" {
			t.Fatalf("after the grace: %v", end)
		}
	})

	t.Run("no-output timeout and spawn error", func(t *testing.T) {
		id := jobID(t, "test-quiet")
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": id, "command": "echo once; sleep 10", "noOutputTimeoutMs": 300}), "spawn")
		end, _ := c.pollUntilEnded(id, 5*time.Second)
		if end["state"] != "failed" || end["terminationReason"] != "no-output-timeout" || output(end, "") != "once\n" {
			t.Fatalf("a quiet job: %v", end)
		}
		id = jobID(t, "test-badcwd")
		rep := c.req(map[string]any{"type": "spawn", "jobId": id, "command": "true", "cwd": "/nonexistent-dir"})
		if rep["success"] != false || !strings.Contains(rep["error"].(string), "nonexistent-dir") {
			t.Fatalf("spawn in a missing directory: %v", rep)
		}
		st := c.req(map[string]any{"type": "status", "jobId": id})["job"].(map[string]any)
		if st["state"] != "failed" || st["terminationReason"] != "spawn-error" {
			t.Fatalf("the job that could not start: %v", st)
		}
		sub := c.req(map[string]any{"type": "subscribe", "jobId": id})
		if evs := sub["events"].([]any); len(evs) != 1 || evs[0].(map[string]any)["kind"] != "job.failed" {
			t.Fatalf("events of the job that could not start: %v", sub)
		}
	})

	t.Run("status and list-jobs", func(t *testing.T) {
		a, b := jobID(t, "test-all-1"), jobID(t, "test-all-2")
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": a, "command": "echo 1"}), "spawn")
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": b, "command": "sleep 10"}), "spawn")
		c.pollUntilEnded(a, 5*time.Second)
		one := c.req(map[string]any{"type": "status", "jobId": a})
		wantOK(t, one, "status")
		job := one["job"].(map[string]any)
		if job["jobId"] != a || job["state"] != "exited" || job["exitCode"] != 0.0 || job["outputBytes"] != 2.0 || job["startedAtMs"].(float64) <= 0 {
			t.Fatalf("status of %s: %v", a, job)
		}
		all := c.req(map[string]any{"type": "status"})
		wantOK(t, all, "status")
		var ids []string
		for _, j := range all["jobs"].([]any) {
			ids = append(ids, j.(map[string]any)["jobId"].(string))
		}
		if len(ids) < 2 || ids[len(ids)-2] != a || ids[len(ids)-1] != b {
			t.Fatalf("status of all jobs: %v, want spawn order ending in %s, %s", ids, a, b)
		}
		listed := c.req(map[string]any{"type": "list-jobs"})
		wantOK(t, listed, "list-jobs")
		found := false
		for _, j := range listed["jobs"].([]any) {
			j := j.(map[string]any)
			if j["jobId"] == a || j["state"] == "exited" || j["state"] == "failed" {
				t.Fatalf("list-jobs lists an ended job: %v", j)
			}
			if j["jobId"] == b {
				found = j["state"] == "running" && j["lastSeq"].(float64) >= 0
			}
		}
		if !found {
			t.Fatalf("list-jobs: %s not listed running: %v", b, listed)
		}
		wantOK(t, c.req(map[string]any{"type": "kill", "jobId": b}), "kill")
		rep := c.req(map[string]any{"type": "status", "jobId": "no-such-job"})
		if rep["success"] != false || rep["error"] != "Job not found" {
			t.Fatalf("status of an unknown job: %v", rep)
		}
	})

	t.Run("unknown jobs", func(t *testing.T) {
		rep := c.req(map[string]any{"type": "poll", "jobId": "no-such-job", "cursor": 0})
		if rep["success"] != false || rep["state"] != "failed" || rep["cursor"] != 0.0 || rep["error"] != "Job not found" || len(rep["chunks"].([]any)) != 0 {
			t.Fatalf("poll of an unknown job: %v", rep)
		}
		rep = c.req(map[string]any{"type": "subscribe", "jobId": "no-such-job"})
		if rep["success"] != false || rep["error"] != "Job not found" || rep["jobId"] != "no-such-job" {
			t.Fatalf("subscribe of an unknown job: %v", rep)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, tc := range []struct {
			body, errHas string
		}{
			{`{`, "malformed JSON"},
			{`{"type":"spawn",`, "malformed JSON"},
			{`{"type":"nope"}`, "unknown request type"},
			{`{}`, "no type"},
			{`{"type":"poll","jobId":["x"]}`, "malformed JSON"},
			{`{"type":"poll","jobId":"x","cursor":"zero"}`, "not an integer"},
			{`{"type":"health","x":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, "malformed JSON"},
			{"{\"type\":\"spawn\",\"jobId\":\"x\",\"command\":\"echo \xff\"}", "not valid UTF-8"},
			// (past the limit, within the 64 KiB more a frame may have
			// before the connection is dropped, as for any client)
			{`{"type":"spawn","jobId":"x","command":"` + strings.Repeat("a", 1<<20) + `"}`, "the limit is"},
		} {
			rep := c.raw([]byte(tc.body))
			if rep["type"] != "health" || rep["success"] != false || !strings.Contains(fmt.Sprint(rep["error"]), tc.errHas) {
				t.Fatalf("request %.60q: reply %.300v, want type health, success false, an error with %q", tc.body, rep, tc.errHas)
			}
		}
		// The REQ socket is not wedged, and extra fields are ignored.
		wantOK(t, c.req(map[string]any{"type": "health", "extra": map[string]any{"a": []any{1, nil}}}), "health")
		// Nothing of those ran.
		if rep := c.req(map[string]any{"type": "status", "jobId": "x"}); rep["success"] != false {
			t.Fatalf("a bad spawn started job x: %v", rep)
		}
	})
	_ = ts
}

// TestOpenClawJobLimit: past --max-jobs a spawn is refused with the
// dialect's text, and starts nothing.
func TestOpenClawJobLimit(t *testing.T) {
	_, c := newJSONServer(t, func(cfg *Config) { cfg.Jobs.MaxJobs = 2 })
	for i := range 2 {
		wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": fmt.Sprintf("limit-%d", i), "command": "sleep 10"}), "spawn")
	}
	rep := c.req(map[string]any{"type": "spawn", "jobId": "limit-2", "command": "echo no"})
	if rep["success"] != false || !strings.Contains(rep["error"].(string), "Max concurrent jobs reached") {
		t.Fatalf("a third job past a limit of 2: %v", rep)
	}
	if rep := c.req(map[string]any{"type": "status", "jobId": "limit-2"}); rep["success"] != false {
		t.Fatalf("the refused job exists: %v", rep)
	}
	if h := c.req(map[string]any{"type": "health"}); h["activeJobs"] != 2.0 {
		t.Fatalf("health: %v", h)
	}
}
