package server

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// openClawView reads the journal at path as OpenClaw's tools do: its
// version and "jobs" (nil when it cannot be read).
func openClawView(path string) (version int, jobs []map[string]any) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, nil
	}
	var doc struct {
		Version int              `json:"version"`
		Jobs    []map[string]any `json:"jobs"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return 0, nil
	}
	return doc.Version, doc.Jobs
}

// TestJournalIsOpenClawJournal: the journal is also OpenClaw's: version 2,
// "jobs" the jobs not yet ended with the Node supervisor's fields, our
// records beside them; after a restart the job that was running answers
// status as failed, as the Node supervisor's do.
func TestJournalIsOpenClawJournal(t *testing.T) {
	ts, c := newJSONServer(t, func(cfg *Config) { cfg.JournalFlushInterval = 100 * time.Millisecond })
	path := ts.cfg.JournalPath()
	running, done := jobID(t, "journal-running"), jobID(t, "journal-done")
	wantOK(t, c.req(map[string]any{"type": "spawn", "jobId": done, "command": "echo hi"}), "spawn")
	c.pollUntilEnded(done, 10*time.Second)
	rep := c.req(map[string]any{"type": "spawn", "jobId": running, "command": "sleep 30", "cwd": "/tmp"})
	wantOK(t, rep, "spawn")
	pid := rep["pid"].(float64)

	var jobs []map[string]any
	eventually(t, 10*time.Second, "the running job in the journal's OpenClaw view", func() bool {
		var v int
		v, jobs = openClawView(path)
		return v == 2 && len(jobs) == 1 && jobs[0]["jobId"] == running
	})
	e := jobs[0]
	if e["command"] != "sleep 30" || e["cwd"] != "/tmp" || e["state"] != "running" || e["pid"] != pid ||
		e["lastSeq"] != 0.0 || e["startedAtMs"].(float64) < float64(time.Now().Add(-time.Minute).UnixMilli()) || len(e) != 7 {
		t.Fatalf("journal entry %v", e)
	}
	// Our records are beside: the finished job's too.
	doc, err := journal.Read(path)
	if err != nil || len(doc.Jobs) != 2 {
		t.Fatalf("records: %+v, %v", doc, err)
	}

	// Stopped, the supervisor ends its jobs: none is left in the view.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if v, jobs := openClawView(path); v != 2 || jobs == nil || len(jobs) != 0 {
		t.Fatalf("journal after a stop: version %d, jobs %v", v, jobs)
	}
	ts2 := startServer(t, ts.cfg)
	c2 := startJSONClient(t, ts2)
	st := c2.req(map[string]any{"type": "status", "jobId": running})
	wantOK(t, st, "status")
	if job := st["job"].(map[string]any); job["state"] != "failed" || job["pid"] != pid {
		t.Fatalf("status after a restart: %v", job)
	}
	st = c2.req(map[string]any{"type": "status", "jobId": done})
	if job := st["job"].(map[string]any); job["state"] != "exited" || job["exitCode"] != 0.0 {
		t.Fatalf("status of the finished job after a restart: %v", job)
	}
}

// TestRecoversVersion1Journal: a journal the previous version wrote
// (records under "jobs") is recovered: the finished job as it was, the
// running one ended with supervisor-restart; the next write is version 2.
func TestRecoversVersion1Journal(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	v1 := `{"version":1,"instanceId":"dead","pid":1,"writtenAt":` + itoa(now) + `,"jobs":[` +
		`{"jobId":"old-done","argv":["true"],"pid":0,"pgid":0,"startTicks":0,"bootId":"","state":"exited","createdAt":` + itoa(now) +
		`,"startedAt":` + itoa(now) + `,"updatedAt":` + itoa(now) + `,"endedAt":` + itoa(now) + `,"lastOutputAt":0,"reason":"exit","exitCode":3,"instanceId":"dead","stdoutBytes":0,"stderrBytes":0,"outputEnd":0,"lastSeq":2,"timeoutMs":0,"noOutputTimeoutMs":0},` +
		`{"jobId":"old-running","shell":"sleep 100","pid":999999999,"pgid":999999999,"startTicks":1,"bootId":"gone","state":"running","createdAt":` + itoa(now) +
		`,"startedAt":` + itoa(now) + `,"updatedAt":` + itoa(now) + `,"lastOutputAt":0,"instanceId":"dead","stdoutBytes":0,"stderrBytes":0,"outputEnd":0,"lastSeq":1,"timeoutMs":0,"noOutputTimeoutMs":0}]}`
	if err := os.WriteFile(cfg.JournalPath(), []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, cfg)
	ctx := ctxT(t, 10*time.Second)
	done, err := ts.client.Status(ctx, "old-done")
	if err != nil || done.State != protocol.StateExited || done.ExitCode == nil || *done.ExitCode != 3 {
		t.Fatalf("finished job of a version 1 journal: %+v, %v", done, err)
	}
	run, err := ts.client.Status(ctx, "old-running")
	if err != nil || run.State != protocol.StateExited || run.Reason != protocol.ReasonSupervisorRestart {
		t.Fatalf("running job of a version 1 journal: %+v, %v", run, err)
	}
	eventually(t, 10*time.Second, "the journal rewritten as version 2", func() bool {
		v, jobs := openClawView(cfg.JournalPath())
		return v == 2 && jobs != nil
	})
	doc, err := journal.Read(cfg.JournalPath())
	if err != nil || len(doc.Jobs) != 2 {
		t.Fatalf("rewritten journal: %+v, %v", doc, err)
	}
}

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

// TestTakesOverNodeJournal: on the journal OpenClaw's Node supervisor
// left, the jobs it had running answer status as failed (as the Node
// supervisor's own restart reports them), their ids taken.
func TestTakesOverNodeJournal(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	node := `{"version":2,"updatedAtMs":` + itoa(time.Now().UnixMilli()) + `,"jobs":[{"jobId":"node-job","command":"sleep 60","startedAtMs":1,"state":"running","lastSeq":3,"pid":999999999}]}`
	if err := os.WriteFile(cfg.JournalPath(), []byte(node), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, cfg)
	c := startJSONClient(t, ts)
	st := c.req(map[string]any{"type": "status", "jobId": "node-job"})
	wantOK(t, st, "status")
	if job := st["job"].(map[string]any); job["state"] != "failed" || job["terminationReason"] != "spawn-error" {
		t.Fatalf("status of a Node journal's running job: %v", job)
	}
	rep := c.req(map[string]any{"type": "spawn", "jobId": "node-job", "command": "true"})
	if rep["success"] != false {
		t.Fatalf("spawn of a taken id: %v", rep)
	}
}
