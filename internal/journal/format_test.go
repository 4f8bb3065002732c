package journal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadsVersion1: a journal the previous version wrote (records under
// "jobs", testdata/journal-v1.json) loads with every record, and the
// next write is of the current version.
func TestReadsVersion1(t *testing.T) {
	b, err := os.ReadFile("testdata/journal-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "journal.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	j := New(path)
	got, err := j.Load()
	if err != nil {
		t.Fatalf("Load of a version 1 journal: %v", err)
	}
	want := sampleFile()
	want.IntentsGeneration, want.IntentsCovered = "0123456789abcdef", 3
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("version 1 journal read as\n%+v\nwant\n%+v", got, want)
	}
	if err := j.Save(got); err != nil {
		t.Fatal(err)
	}
	again, err := j.Load()
	if err != nil || !reflect.DeepEqual(again, want) {
		t.Fatalf("rewritten: %+v, %v", again, err)
	}
	var head map[string]json.RawMessage
	b, _ = os.ReadFile(path)
	if err := json.Unmarshal(b, &head); err != nil || string(head["version"]) != "2" {
		t.Fatalf("rewritten journal's version: %s (%v)", head["version"], err)
	}
}

// TestDocumentIsOpenClawJournal: what SaveEncoded writes is OpenClaw's
// journal, {"version": 2, "updatedAtMs", "jobs"} with the OpenClaw view
// as given (an empty array for none), our header and records beside it.
func TestDocumentIsOpenClawJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.json")
	j := New(path)
	rec := []byte(`{"jobId":"j-1","pid":10,"pgid":10,"startTicks":1,"bootId":"b","state":"running","createdAt":1,"startedAt":1,"updatedAt":1,"lastOutputAt":1,"instanceId":"i","stdoutBytes":0,"stderrBytes":0,"outputEnd":0,"lastSeq":3,"timeoutMs":0,"noOutputTimeoutMs":0}`)
	view := []OpenClawJob{{JobID: "j-1", Command: "sleep 5", Cwd: "/srv", StartedAtMs: 1, State: "running", LastSeq: 2, Pid: 10}}
	hdr := &File{InstanceID: "i", Pid: 7, WrittenAt: 1234, OpenClaw: view, IntentsGeneration: "g", IntentsCovered: 2}
	if err := j.SaveEncoded(hdr, [][]byte{rec}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var oc struct {
		Version     int              `json:"version"`
		UpdatedAtMs int64            `json:"updatedAtMs"`
		Jobs        []map[string]any `json:"jobs"`
	}
	if err := json.Unmarshal(b, &oc); err != nil {
		t.Fatal(err)
	}
	wantJob := map[string]any{"jobId": "j-1", "command": "sleep 5", "cwd": "/srv", "startedAtMs": 1.0, "state": "running", "lastSeq": 2.0, "pid": 10.0}
	if oc.Version != 2 || oc.UpdatedAtMs != 1234 || len(oc.Jobs) != 1 || !reflect.DeepEqual(oc.Jobs[0], wantJob) {
		t.Fatalf("OpenClaw's reading: %+v\nof %s", oc, b)
	}
	doc, err := j.Load()
	if err != nil || doc.InstanceID != "i" || doc.Pid != 7 || doc.IntentsGeneration != "g" || doc.IntentsCovered != 2 ||
		len(doc.Jobs) != 1 || doc.Jobs[0].LastSeq != 3 || !reflect.DeepEqual(doc.OpenClaw, view) {
		t.Fatalf("read back: %+v, %v", doc, err)
	}
	// No job running: "jobs" is an empty array, never null.
	if err := j.SaveEncoded(&File{InstanceID: "i"}, nil); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !strings.Contains(string(b), `"jobs":[]`) || !strings.Contains(string(b), `"records":[]`) {
		t.Fatalf("empty journal: %s", b)
	}
	if err := j.Save(&File{InstanceID: "i"}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !strings.Contains(string(b), `"jobs":[]`) {
		t.Fatalf("empty journal from Save: %s", b)
	}
}

// TestImportsOpenClawJournal: a journal OpenClaw's Node supervisor wrote
// (no records of ours) loads with each job it had not seen end as a
// finished record (supervisor-restart, its process not adopted); ended
// ones and fields this reader does not know are passed over.
func TestImportsOpenClawJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.json")
	node := `{
  "version": 2,
  "updatedAtMs": 1700000000000,
  "jobs": [
    {"jobId": "a", "command": "sleep 60", "cwd": "/srv", "startedAtMs": 1699999999000, "state": "running", "lastSeq": 4, "pid": 4321},
    {"jobId": "b", "command": "make", "startedAtMs": 1699999999500, "state": "pending", "lastSeq": -1, "future": {"x": 1}},
    {"jobId": "c", "command": "true", "startedAtMs": 1, "state": "exited", "lastSeq": 2, "pid": 9, "exitCode": 0},
    {"jobId": "d", "command": "x", "startedAtMs": 1, "state": "running", "lastSeq": -5, "pid": 9}
  ]
}`
	if err := os.WriteFile(path, []byte(node), 0o600); err != nil {
		t.Fatal(err)
	}
	doc, err := New(path).Load()
	if err != nil {
		t.Fatal(err)
	}
	if doc.Imported != 2 || len(doc.Jobs) != 2 || len(doc.Dropped) != 1 {
		t.Fatalf("imported %d, records %+v, dropped %q", doc.Imported, doc.Jobs, doc.Dropped)
	}
	a, b := doc.Jobs[0], doc.Jobs[1]
	if a.JobID != "a" || !a.Finished() || a.Reason != "supervisor-restart" || a.Pid != 4321 || a.Pgid != 0 ||
		a.LastSeq != 5 || a.Cwd != "/srv" || a.StartedAt != 1699999999000 || a.EndedAt == 0 ||
		!reflect.DeepEqual(a.Argv, []string{"/bin/bash", "-c", "sleep 60"}) || a.Error == "" {
		t.Errorf("running job imported as %+v", a)
	}
	if b.JobID != "b" || b.LastSeq != 0 || b.Pid != 0 || !b.Finished() {
		t.Errorf("pending job imported as %+v", b)
	}
}
