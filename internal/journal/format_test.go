package journal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
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

// TestRecordFormatUnchanged: testdata/journal-v2-full.json was written
// by the supervisor before the engine took its records straight from this
// package (every field of a record, a one-shot job's and a service's,
// set). It still loads as those records, and writing them gives the same
// bytes: the format did not change with the types.
func TestRecordFormatUnchanged(t *testing.T) {
	golden, err := os.ReadFile("testdata/journal-v2-full.json")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(golden)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := fullFile()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read as\n%+v\nwant\n%+v", got, want)
	}
	path := filepath.Join(t.TempDir(), "journal.json")
	if err := New(path).Save(want); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(golden) {
		t.Fatalf("written as\n%s\nwant\n%s", b, golden)
	}
	// The records alone, as the writer encodes them one by one.
	for i := range want.Jobs {
		rb, err := json.Marshal(&want.Jobs[i])
		if err != nil || !strings.Contains(string(golden), string(rb)) {
			t.Fatalf("record %d encoded as %s (%v): not in the golden file", i, rb, err)
		}
	}
}

// fullFile is testdata/journal-v2-full.json.
func fullFile() *File {
	three, zero := 3, 0
	return &File{
		Version: Version, WrittenAt: 1700000000999, InstanceID: "inst-9", Pid: 777,
		OpenClaw:          []OpenClawJob{{JobID: "job-run", Command: "sleep 60", Cwd: "/srv", StartedAtMs: 1700000000100, State: "running", LastSeq: 4, Pid: 4321}},
		IntentsGeneration: "00112233445566778899aabbccddeeff", IntentsCovered: 12,
		Jobs: []Record{
			{
				JobID: "job-run", Name: "build", Argv: []string{"/bin/sh", "-c", "make all"}, Cwd: "/srv",
				Labels: map[string]string{"team": "infra", "ünï": "cödé"}, SessionID: "sess-7",
				Pid: 4321, Pgid: 4321, StartTicks: 987654321, BootID: "boot-1", State: protocol.StateExiting,
				CreatedAt: 1700000000000, StartedAt: 1700000000100, UpdatedAt: 1700000000900, LastOutputAt: 1700000000800,
				InstanceID: "inst-9", StdoutBytes: 5000, StderrBytes: 12, OutputEnd: 70000, LastSeq: 5,
				TimeoutMs: 60000, NoOutputMs: 5000,
				OutputTail: []byte("tail\x00\xff\n"), OutputTailSeq: 4, OutputTailEnd: 4102,
				OutputTailChunks:  []TailChunk{{Seq: 3, Stream: protocol.Stdout, Len: 4}, {Seq: 4, Stream: protocol.Stderr, Len: 3}},
				OutputUnpublished: []Unpublished{{Stream: protocol.Stdout, Data: []byte("more\n")}},
				Members:           []Member{{Pid: 4322, StartTicks: 987654400}, {Pid: 4330, StartTicks: 987654500}},
				Cgroup:            "/sys/fs/cgroup/es/job-run", OutputDisk: true,
				PendingEnd:  protocol.ReasonOverallTimeout,
				LeaderExit:  &LeaderExit{ExitCode: &three},
				OutputSkips: []OffsetRange{{0, 4096}, {4102, 65536}},
			},
			{
				JobID: "svc-1", Argv: []string{"/usr/bin/server", "--port", "8080"}, Pid: 5000, Pgid: 5000, StartTicks: 11, BootID: "boot-1",
				State: protocol.StateExited, CreatedAt: 1, StartedAt: 2, UpdatedAt: 3, EndedAt: 4, LastOutputAt: 3,
				Reason: protocol.ReasonSignal, Signal: "SIGKILL", Error: "killed", ExitCode: &zero, InstanceID: "inst-8",
				LastSeq: 9, OutputEnd: 200, Pty: true, Rows: 40, Cols: 120,
				OutputTail: []byte("ok\n"), OutputTailSeq: 8,
				OutputTailChunks: []TailChunk{{Seq: 8, Stream: protocol.Stdout, Len: 3, Attempt: 2}},
				Service: &Service{
					Spec: protocol.SpawnArgs{Argv: []string{"/usr/bin/server", "--port", "8080"}, Env: map[string]string{"TOKEN": "s3cret"}, GraceMs: 2000,
						Restart: &protocol.RestartPolicy{Policy: "always", RestartDelayMs: 100}, WatchdogIntervalMs: 1000},
					Attempt: 2, Restarts: 1, Consecutive: 1, Ends: []int64{1700000000500},
					History: []protocol.RunRecord{{Attempt: 1, StartedAt: 2, EndedAt: 3, DurationMs: 1, Pid: 4999, Reason: protocol.ReasonExit, ExitCode: &three,
						Restarted: true, Tail: []string{"a", "b"}}},
					RunOutputStart: 197, OutputSkips: []OffsetRange{{100, 90}},
				},
			},
		},
	}
}

// TestOffsetRangeJSON: a skipped range is the pair [at, n], read as a
// [2]int64 is (missing elements 0, extra ones ignored, null nothing).
func TestOffsetRangeJSON(t *testing.T) {
	b, err := json.Marshal([]OffsetRange{{0, 1}, {-5, 1 << 62}})
	if err != nil || string(b) != "[[0,1],[-5,4611686018427387904]]" {
		t.Fatalf("encoded as %s (%v)", b, err)
	}
	var got []OffsetRange
	if err := json.Unmarshal([]byte(`[[7],[1,2,3],null,[4,5]]`), &got); err != nil {
		t.Fatal(err)
	}
	if want := []OffsetRange{{7, 0}, {1, 2}, {0, 0}, {4, 5}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded as %v, want %v", got, want)
	}
	for _, bad := range []string{`[["a",1]]`, `[{"at":1}]`, `[1]`} {
		if err := json.Unmarshal([]byte(bad), &got); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}
