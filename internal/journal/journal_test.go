package journal

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment variables that turn the test binary into a helper process.
const (
	helperEnv    = "JOURNAL_TEST_HELPER"
	helperDirEnv = "JOURNAL_TEST_DIR"
	// helperFirstEnv tells the writer helper which document to save first.
	helperFirstEnv = "JOURNAL_TEST_FIRST"
	// helperLimit is the hard lifetime of a helper process, whatever happens
	// to its parent.
	helperLimit = 10 * time.Second
)

func intPtr(v int) *int { return &v }

func sampleFile() *File {
	return &File{
		Version:    Version,
		InstanceID: "inst-1",
		Pid:        4242,
		WrittenAt:  1700000000123,
		Jobs: []Record{
			{
				JobID:      "job-a",
				Argv:       []string{"/bin/sh", "-c", "echo hi"},
				Cwd:        "/tmp",
				Labels:     map[string]string{"team": "infra", "kind": "batch", "ünï": "cödé"},
				SessionID:  "sess-1",
				Pid:        100,
				Pgid:       100,
				StartTicks: 123456789,
				BootID:     "boot-xyz",
				State:      "exited",
				CreatedAt:  1, StartedAt: 2, UpdatedAt: 3, EndedAt: 4, LastOutputAt: 5,
				Reason:        "exited",
				ExitCode:      intPtr(0), // a pointer to zero must survive omitempty
				InstanceID:    "inst-0",
				StdoutBytes:   10,
				StderrBytes:   20,
				OutputEnd:     30,
				LastSeq:       7,
				TimeoutMs:     1000,
				NoOutputMs:    500,
				OutputTail:    []byte{0, 1, 2, 0xff, 0xfe, '\n', 'h', 'i'},
				OutputTailSeq: 7,
			},
			{
				JobID:      "job-b",
				Shell:      "sleep 100 | cat",
				Labels:     map[string]string{"x": ""},
				Pid:        200,
				Pgid:       200,
				State:      "running",
				InstanceID: "inst-1",
				ExitCode:   nil,
			},
			{
				JobID:      "job-c",
				Argv:       []string{"false"},
				State:      "exited",
				ExitCode:   intPtr(137),
				Signal:     "SIGKILL",
				Error:      "killed by timeout",
				InstanceID: "inst-1",
				OutputTail: []byte("tail"),
			},
			{JobID: "job-d", State: "starting"},
			{JobID: "job-e", State: "exiting", Pid: 1, Pgid: 1},
		},
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func isEmptyFile(f *File) bool {
	return f != nil && f.Version == Version && f.InstanceID == "" && f.Pid == 0 && f.WrittenAt == 0 && len(f.Jobs) == 0
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.json")
	j := New(path)
	if j.Path() != path {
		t.Fatalf("Path() = %q, want %q", j.Path(), path)
	}

	want := sampleFile()
	in := sampleFile()
	in.Version = 0 // Save stamps the version itself
	if err := j.Save(in); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if in.Version != Version {
		t.Errorf("Save did not stamp Version: %d", in.Version)
	}
	if got := j.Writes.Load(); got != 1 {
		t.Errorf("Writes = %d, want 1", got)
	}
	if got := j.Failures.Load(); got != 0 {
		t.Errorf("Failures = %d, want 0", got)
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode(); mode != 0o600 {
		t.Errorf("journal mode = %v, want 0600", mode)
	}
	if names := dirNames(t, dir); !reflect.DeepEqual(names, []string{"journal.json"}) {
		t.Errorf("directory after Save holds %q, want only journal.json", names)
	}

	got, err := New(path).Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip mismatch:\n got %+v\nwant %+v", got, want)
	}
	// Spot-check the fields most likely to be lost.
	if got.Jobs[0].ExitCode == nil || *got.Jobs[0].ExitCode != 0 {
		t.Errorf("ExitCode pointer to 0 lost: %v", got.Jobs[0].ExitCode)
	}
	if got.Jobs[1].ExitCode != nil {
		t.Errorf("nil ExitCode became %d", *got.Jobs[1].ExitCode)
	}
	if *got.Jobs[2].ExitCode != 137 {
		t.Errorf("ExitCode = %d, want 137", *got.Jobs[2].ExitCode)
	}
	if !bytes.Equal(got.Jobs[0].OutputTail, want.Jobs[0].OutputTail) {
		t.Errorf("OutputTail = %v, want %v", got.Jobs[0].OutputTail, want.Jobs[0].OutputTail)
	}
	if !reflect.DeepEqual(got.Jobs[0].Labels, want.Jobs[0].Labels) {
		t.Errorf("Labels = %v, want %v", got.Jobs[0].Labels, want.Jobs[0].Labels)
	}
	if !got.Jobs[0].Finished() || got.Jobs[1].Finished() {
		t.Errorf("Finished() wrong: %v %v", got.Jobs[0].Finished(), got.Jobs[1].Finished())
	}

	// A second Save replaces the document and leaves no temp file either.
	second := &File{InstanceID: "inst-2", Jobs: []Record{{JobID: "only", State: "running"}}}
	if err := j.Save(second); err != nil {
		t.Fatalf("second Save: %v", err)
	}
	if got := j.Writes.Load(); got != 2 {
		t.Errorf("Writes = %d, want 2", got)
	}
	got, err = j.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got.InstanceID != "inst-2" || len(got.Jobs) != 1 || got.Jobs[0].JobID != "only" {
		t.Errorf("second Load = %+v", got)
	}
	if names := dirNames(t, dir); !reflect.DeepEqual(names, []string{"journal.json"}) {
		t.Errorf("directory after second Save holds %q, want only journal.json", names)
	}
}

func TestSaveEmptyJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.json")
	j := New(path)
	if err := j.Save(&File{}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !isEmptyFile(got) {
		t.Errorf("Load = %+v, want an empty journal", got)
	}
}

func TestLoadMissing(t *testing.T) {
	dir := t.TempDir()
	j := New(filepath.Join(dir, "journal.json"))
	got, err := j.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !isEmptyFile(got) {
		t.Errorf("Load = %+v, want empty journal of version %d", got, Version)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Errorf("Load of a missing journal created %q", names)
	}
}

func TestLoadCorrupt(t *testing.T) {
	valid := mustMarshal(t, sampleFile())
	random := make([]byte, 4096)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(r.UintN(256))
	}
	rec := func(js string) string {
		return `{"version":1,"instanceId":"i","pid":1,"writtenAt":1,"jobs":[` + js + `]}`
	}

	cases := []struct {
		name string
		data []byte
	}{
		{"truncated", valid[:len(valid)/2]},
		{"truncated-one-byte-short", valid[:len(valid)-1]},
		{"random-bytes", random},
		{"empty", []byte{}},
		{"whitespace-only", []byte(" \n\t ")},
		{"array", []byte(`[]`)},
		{"wrong-object", []byte(`{"foo":1}`)},
		{"string", []byte(`"x"`)},
		{"null", []byte(`null`)},
		{"number", []byte(`1`)},
		{"unknown-version", []byte(`{"version":99,"jobs":[]}`)},
		{"version-zero", []byte(`{"version":0,"jobs":[]}`)},
		{"missing-version", []byte(`{"jobs":[]}`)},
		{"jobs-wrong-type", []byte(`{"version":1,"jobs":{}}`)},
		{"unknown-record-field", []byte(rec(`{"jobId":"a","state":"running","bogus":true}`))},
		{"trailing-garbage", append(append([]byte{}, valid...), []byte("garbage")...)},
		{"trailing-second-document", append(append([]byte{}, valid...), valid...)},
		{"trailing-close-brace", append(append([]byte{}, valid...), '}')},
		{"trailing-close-bracket", append(append([]byte{}, valid...), []byte("\n]")...)},
		{"v2-unknown-field", []byte(`{"version":2,"updatedAtMs":1,"jobs":[],"instanceId":"i","pid":1,"records":[],"bogus":1}`)},
		{"v2-records-wrong-type", []byte(`{"version":2,"instanceId":"i","records":{}}`)},
		{"v2-unknown-record-field", []byte(`{"version":2,"instanceId":"i","records":[{"jobId":"a","state":"running","bogus":true}]}`)},
		{"v2-v1-field", []byte(`{"version":2,"instanceId":"i","writtenAt":1,"records":[]}`)},
		{"v1-v2-field", []byte(`{"version":1,"instanceId":"i","records":[]}`)},
		{"openclaw-jobs-wrong-type", []byte(`{"version":2,"updatedAtMs":1,"jobs":{}}`)},
		{"openclaw-job-wrong-type", []byte(`{"version":2,"updatedAtMs":1,"jobs":[{"jobId":7}]}`)},
		{"version-three", []byte(`{"version":3,"updatedAtMs":1,"jobs":[]}`)},
		{"version-string", []byte(`{"version":"2","jobs":[]}`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "journal.json")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := New(path).Load()
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Load error = %v (%T), want *CorruptError", err, err)
			}
			if ce.Err == nil || ce.Path != path || !strings.Contains(ce.Error(), path) {
				t.Errorf("CorruptError = %+v", ce)
			}
			if !errors.Is(err, ce.Err) {
				t.Errorf("CorruptError does not unwrap to its cause")
			}
			if !isEmptyFile(got) {
				t.Errorf("Load returned %+v, want an empty journal", got)
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("original journal still present (stat err %v)", err)
			}
			moved, err := filepath.Glob(filepath.Join(dir, "journal.json.corrupt-*"))
			if err != nil {
				t.Fatal(err)
			}
			if len(moved) != 1 {
				t.Fatalf("corrupt copies = %q, want exactly one", moved)
			}
			if ce.MovedTo != moved[0] {
				t.Errorf("MovedTo = %q, file is at %q", ce.MovedTo, moved[0])
			}
			b, err := os.ReadFile(moved[0])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, tc.data) {
				t.Errorf("moved-aside file differs from the original bytes")
			}
			if names := dirNames(t, dir); len(names) != 1 {
				t.Errorf("directory holds %q, want only the corrupt copy", names)
			}

			// The next Load sees no journal at all and leaves the copy alone.
			got, err = New(path).Load()
			if err != nil || !isEmptyFile(got) {
				t.Errorf("Load after move = %+v, %v; want empty journal, nil", got, err)
			}
			if again, _ := filepath.Glob(filepath.Join(dir, "journal.json.corrupt-*")); len(again) != 1 {
				t.Errorf("corrupt copies after second Load = %q", again)
			}
		})
	}
}

func TestLoadValidEdgeCases(t *testing.T) {
	// Documents that are valid journals must not be moved aside.
	cases := map[string]string{
		"trailing-whitespace": `{"version":1,"jobs":[]}` + " \n\t\n",
		"null-jobs":           `{"version":1,"jobs":null}`,
		"no-jobs":             `{"version":1}`,
		"zero-pids":           `{"version":1,"jobs":[{"jobId":"a","state":"exited","pid":0,"pgid":0}]}`,
		"openclaw-empty":      `{"version":2,"updatedAtMs":1,"jobs":[]}`,
		"v2-null-views":       `{"version":2,"jobs":null,"instanceId":"","records":null}`,
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.json")
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := New(path).Load()
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got.Version != Version {
				t.Errorf("Version = %d", got.Version)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("valid journal was moved: %v", err)
			}
		})
	}
}

func TestLoadDoesNotFollowSymlink(t *testing.T) {
	dir := t.TempDir()
	targetDir := t.TempDir()
	target := filepath.Join(targetDir, "real.json")
	// The target is a perfectly valid journal: if Load followed the link it
	// would return this content.
	content := mustMarshal(t, &File{
		Version:    Version,
		InstanceID: "from-symlink-target",
		Jobs:       []Record{{JobID: "secret", State: "running"}},
	})
	if err := os.WriteFile(target, content, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "journal.json")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}

	got, err := New(path).Load()
	if err == nil {
		t.Fatalf("Load through a symlink succeeded: %+v", got)
	}
	if got != nil && (got.InstanceID == "from-symlink-target" || len(got.Jobs) != 0) {
		t.Errorf("Load read the symlink target: %+v", got)
	}
	var ce *CorruptError
	if !errors.As(err, &ce) && !errors.Is(err, syscall.ELOOP) {
		t.Errorf("Load error = %v, want ELOOP or *CorruptError", err)
	}
	b, err := os.ReadFile(target)
	if err != nil {
		t.Fatalf("symlink target gone: %v", err)
	}
	if !bytes.Equal(b, content) {
		t.Errorf("symlink target was modified")
	}
	if names := dirNames(t, targetDir); !reflect.DeepEqual(names, []string{"real.json"}) {
		t.Errorf("target directory holds %q", names)
	}
}

func TestLoadRemovesLeftoverTempFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.json")
	j := New(path)
	if err := j.Save(sampleFile()); err != nil {
		t.Fatal(err)
	}
	leftovers := []string{".journal.json.tmp-123", ".journal.json.tmp-abc", ".journal.json.tmp-"}
	for _, n := range leftovers {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(`{"half":`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Files that merely look similar belong to someone else.
	others := []string{".other.json.tmp-1", "journal.json.tmp-1", "journal.json.bak"}
	for _, n := range others {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	got, err := j.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !reflect.DeepEqual(got, sampleFile()) {
		t.Errorf("Load returned %+v", got)
	}
	want := append([]string{"journal.json"}, others...)
	gotNames := dirNames(t, dir)
	if len(gotNames) != len(want) {
		t.Fatalf("directory holds %q, want %q", gotNames, want)
	}
	for _, n := range want {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s removed: %v", n, err)
		}
	}

	// Also with no journal at all.
	for _, n := range leftovers {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Load(); err != nil {
		t.Fatalf("Load: %v", err)
	}
	for _, n := range leftovers {
		if _, err := os.Stat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed (err %v)", n, err)
		}
	}
}

func TestSaveFailureCounts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "journal.json")
	j := New(path)
	if err := j.Save(sampleFile()); err == nil {
		t.Fatal("Save into a missing directory succeeded")
	}
	if w, f := j.Writes.Load(), j.Failures.Load(); w != 0 || f != 1 {
		t.Errorf("Writes, Failures = %d, %d; want 0, 1", w, f)
	}
	if err := j.Save(sampleFile()); err == nil {
		t.Fatal("second Save succeeded")
	}
	if f := j.Failures.Load(); f != 2 {
		t.Errorf("Failures = %d, want 2", f)
	}

	// Once the directory exists, Save works and counts a write.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := j.Save(sampleFile()); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if w, f := j.Writes.Load(), j.Failures.Load(); w != 1 || f != 2 {
		t.Errorf("Writes, Failures = %d, %d; want 1, 2", w, f)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("old content that is longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "new" {
		t.Errorf("content = %q", b)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode())
	}
	if names := dirNames(t, dir); !reflect.DeepEqual(names, []string{"f"}) {
		t.Errorf("directory holds %q", names)
	}
	// Rename onto a directory fails; the temp file is cleaned up.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(sub, []byte("x")); err == nil {
		t.Error("WriteFileAtomic onto a non-empty directory succeeded")
	}
	if names := dirNames(t, dir); !reflect.DeepEqual(names, []string{"f", "sub"}) {
		t.Errorf("directory after failed write holds %q", names)
	}
}

// --- helper processes -------------------------------------------------------

// helperSetup bounds a helper process's life: it exits when its parent dies
// (it is reparented) and in any case after helperLimit.
func helperSetup() {
	ppid := os.Getppid()
	deadline := time.Now().Add(helperLimit)
	go func() {
		for {
			if os.Getppid() != ppid || time.Now().After(deadline) {
				os.Exit(3)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// child is a running helper process that is always reaped.
type child struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	waited bool
}

// startHelper re-executes the test binary as the named helper.
func startHelper(t *testing.T, test, kind, dir string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+kind, helperDirEnv+"="+dir)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdout: bufio.NewReader(out)}
	t.Cleanup(func() { c.kill() })
	return c
}

// waitFor reads the child's stdout until a line equal to want; false if
// the child's output ends first.
func (c *child) waitFor(want string) bool {
	for {
		line, err := c.stdout.ReadString('\n')
		if strings.TrimSpace(line) == want {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// kill SIGKILLs the child and reaps it; safe to call more than once.
func (c *child) kill() {
	if c.waited {
		return
	}
	_ = c.cmd.Process.Kill()
	// Drain stdout so Wait does not block on the pipe copier.
	_, _ = io.Copy(io.Discard, c.stdout)
	_ = c.cmd.Wait()
	c.waited = true
}

// writerDoc builds a document of n records, each of which carries the
// document's instance id as its Cwd, so a torn write would show as an
// inconsistency.
func writerDoc(n int) *File {
	doc := &File{Pid: os.Getpid(), Jobs: make([]Record, n)}
	for i := range doc.Jobs {
		doc.Jobs[i] = Record{
			JobID:      "job-" + strconv.Itoa(i),
			Argv:       []string{"/bin/echo", strings.Repeat("x", 32)},
			Pid:        1000 + i,
			Pgid:       1000 + i,
			State:      "running",
			OutputTail: bytes.Repeat([]byte{byte(i)}, 16),
		}
	}
	return doc
}

// stamp gives doc a fresh instance id and sets every record's Cwd to it.
func stamp(doc *File, seq int) {
	id := fmt.Sprintf("inst-%d-%d-%d", os.Getpid(), seq, len(doc.Jobs))
	doc.InstanceID = id
	doc.WrittenAt = time.Now().UnixMilli()
	doc.OpenClaw = doc.OpenClaw[:0]
	for i := range doc.Jobs {
		doc.Jobs[i].Cwd = id
		doc.Jobs[i].InstanceID = id
		doc.OpenClaw = append(doc.OpenClaw, OpenClawJob{JobID: doc.Jobs[i].JobID, Command: "echo", Cwd: id, State: "running", Pid: doc.Jobs[i].Pid})
	}
}

// TestHelperWriter is not a real test: run as a helper process it saves
// one document (large or small, as helperFirstEnv says), prints "ready",
// and then saves alternating large and small documents until it is killed.
func TestHelperWriter(t *testing.T) {
	if os.Getenv(helperEnv) != "writer" {
		return
	}
	helperSetup()
	j := New(filepath.Join(os.Getenv(helperDirEnv), "journal.json"))
	// Built once: only the ids change per Save, so the time goes into
	// encoding and writing rather than building.
	small, large := writerDoc(10), writerDoc(2000)
	save := func(doc *File, seq int) {
		stamp(doc, seq)
		if err := j.Save(doc); err != nil {
			fmt.Fprintln(os.Stderr, "helper writer:", err)
			os.Exit(4)
		}
	}
	// The first document makes sure a journal exists and decides what the
	// kill will most likely interrupt the overwriting of: a large Save
	// under -race takes longer than the parent's longest delay.
	if os.Getenv(helperFirstEnv) == "large" {
		save(large, 0)
	} else {
		save(small, 0)
	}
	fmt.Println("ready")
	for seq := 1; ; seq++ {
		if seq%2 == 1 {
			save(large, seq)
		} else {
			save(small, seq)
		}
	}
}

// TestHelperLocker is not a real test: run as a helper process it takes
// the lock, says so, and blocks until killed.
func TestHelperLocker(t *testing.T) {
	if os.Getenv(helperEnv) != "locker" {
		return
	}
	helperSetup()
	l, err := Acquire(os.Getenv(helperDirEnv), "child")
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper locker:", err)
		os.Exit(4)
	}
	_ = l
	fmt.Println("locked")
	select {}
}

func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.json")
	seen := map[int]int{} // document size -> times observed
	for i := range 30 {
		first := "small"
		if i%2 == 1 {
			first = "large"
		}
		c := startHelper(t, "TestHelperWriter", "writer", dir, helperFirstEnv+"="+first)
		if !c.waitFor("ready") {
			c.kill()
			t.Fatalf("iteration %d: writer helper did not get ready: %v", i, c.cmd.ProcessState)
		}
		time.Sleep(time.Duration(1+rand.IntN(50)) * time.Millisecond)
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatalf("iteration %d: kill: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, c.stdout)
		err := c.cmd.Wait()
		c.waited = true
		// It must have died from our SIGKILL, not exited on its own (a
		// Save error exits with status 4).
		if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("iteration %d: writer ended with %v, want killed by SIGKILL", i, err)
		}

		// A plain read and unmarshal: Load would move a bad file aside.
		// The helper said "ready" only after a complete Save, so the
		// journal must exist.
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("iteration %d: read: %v", i, err)
		}
		var doc File
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("iteration %d: journal does not parse after SIGKILL (%d bytes): %v", i, len(b), err)
		}
		if doc.Version != Version || doc.InstanceID == "" {
			t.Fatalf("iteration %d: bad header: version %d instance %q", i, doc.Version, doc.InstanceID)
		}
		if n := len(doc.Jobs); n != 2000 && n != 10 {
			t.Fatalf("iteration %d: %d jobs, want 2000 or 10", i, n)
		}
		for k, r := range doc.Jobs {
			if r.Cwd != doc.InstanceID {
				t.Fatalf("iteration %d: record %d has Cwd %q in document %q: torn write", i, k, r.Cwd, doc.InstanceID)
			}
		}
		// The OpenClaw view is of the same document as the records.
		if len(doc.OpenClaw) != len(doc.Jobs) {
			t.Fatalf("iteration %d: %d OpenClaw jobs beside %d records", i, len(doc.OpenClaw), len(doc.Jobs))
		}
		for k, e := range doc.OpenClaw {
			if e.Cwd != doc.InstanceID || e.JobID != doc.Jobs[k].JobID {
				t.Fatalf("iteration %d: OpenClaw job %d (%s, cwd %q) in document %q: torn write", i, k, e.JobID, e.Cwd, doc.InstanceID)
			}
		}
		// And the package's own validation accepts it (without moving it).
		if _, err := Parse(b); err != nil {
			t.Fatalf("iteration %d: parse: %v", i, err)
		}
		seen[len(doc.Jobs)]++
	}
	// Which document survives depends on timing (under -race a large Save
	// outlasts the longest delay), so the mix is reported, not asserted.
	t.Logf("30 kills: journal sizes seen %v", seen)

	// Whatever temp files the kills left behind, Load removes them and
	// reads the surviving journal.
	got, err := New(path).Load()
	if err != nil {
		t.Fatalf("final Load: %v", err)
	}
	for _, r := range got.Jobs {
		if r.Cwd != got.InstanceID {
			t.Fatalf("final Load: inconsistent document")
		}
	}
	if names := dirNames(t, dir); !reflect.DeepEqual(names, []string{"journal.json"}) {
		t.Errorf("directory after Load holds %q", names)
	}
}

// --- lock -------------------------------------------------------------------

func TestLockAcquireRelease(t *testing.T) {
	dir := t.TempDir()
	lockPath := filepath.Join(dir, "lock")
	pid := strconv.Itoa(os.Getpid())

	l, err := Acquire(dir, "inst-a")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	b, err := os.ReadFile(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := "pid " + pid + " instance inst-a\n"; string(b) != want {
		t.Errorf("lock content = %q, want %q", b, want)
	}
	fi, err := os.Stat(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o600 {
		t.Errorf("lock mode = %v, want 0600", fi.Mode())
	}

	// A second open file description cannot take the flock, even in the
	// same process.
	l2, err := Acquire(dir, "inst-b")
	var he *HeldError
	if !errors.As(err, &he) {
		l2.Release()
		t.Fatalf("second Acquire = %v (%T), want *HeldError", err, err)
	}
	if he.Path != lockPath {
		t.Errorf("HeldError.Path = %q, want %q", he.Path, lockPath)
	}
	if !strings.Contains(he.Owner, "pid "+pid) || !strings.Contains(he.Owner, "inst-a") {
		t.Errorf("HeldError.Owner = %q, want our pid %s and instance inst-a", he.Owner, pid)
	}
	if !strings.Contains(he.Error(), he.Owner) {
		t.Errorf("HeldError message %q does not name the owner", he.Error())
	}
	// The failed attempt must not have overwritten the holder's record.
	if b, _ := os.ReadFile(lockPath); !strings.Contains(string(b), "inst-a") {
		t.Errorf("failed Acquire clobbered the lock file: %q", b)
	}

	if err := l.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	var nilLock *Lock
	if err := nilLock.Release(); err != nil {
		t.Errorf("nil Release: %v", err)
	}

	l3, err := Acquire(dir, "inst-c")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	defer l3.Release()
	if b, _ := os.ReadFile(lockPath); string(b) != "pid "+pid+" instance inst-c\n" {
		t.Errorf("lock content after re-acquire = %q", b)
	}
}

func TestLockSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(target, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "lock")); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(dir, "x")
	if err == nil {
		l.Release()
		t.Fatal("Acquire through a symlink succeeded")
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("symlink target modified: %q", b)
	}
}

func TestLockStaleAfterHolderDies(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	c := startHelper(t, "TestHelperLocker", "locker", dir)
	if !c.waitFor("locked") {
		c.kill()
		t.Fatalf("locker helper did not take the lock: %v", c.cmd.ProcessState)
	}
	childPid := strconv.Itoa(c.cmd.Process.Pid)

	l, err := Acquire(dir, "parent")
	var he *HeldError
	if !errors.As(err, &he) {
		l.Release()
		t.Fatalf("Acquire while the child holds the lock = %v, want *HeldError", err)
	}
	if !strings.Contains(he.Owner, "pid "+childPid+" ") {
		t.Errorf("HeldError.Owner = %q, want the child's pid %s", he.Owner, childPid)
	}

	c.kill() // SIGKILL and Wait: the kernel drops the dead holder's flock

	l, err = Acquire(dir, "parent")
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	defer l.Release()
	b, err := os.ReadFile(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "pid " + strconv.Itoa(os.Getpid()) + " instance parent\n"; string(b) != want {
		t.Errorf("lock content = %q, want %q", b, want)
	}
}

// TestOthersJournalIsNotTrusted: a journal another user owns (planted while
// the state directory was open to them) would choose the services the
// supervisor runs and the groups it terminates: it is moved aside like a
// corrupt one. (A security audit ran a command as root through one.)
func TestOthersJournalIsNotTrusted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the journal to another user")
	}
	path := filepath.Join(t.TempDir(), "journal.json")
	j := New(path)
	if err := j.Save(&File{Version: Version, InstanceID: "x", Jobs: []Record{{JobID: "j-1", State: "exited", Reason: "exit"}}}); err != nil {
		t.Fatal(err)
	}
	if doc, err := j.Load(); err != nil || len(doc.Jobs) != 1 {
		t.Fatalf("our own journal: %+v %v", doc, err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	doc, err := j.Load()
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(ce.Err.Error(), "owned by uid 65534") || len(doc.Jobs) != 0 {
		t.Fatalf("another user's journal: %+v %v", doc, err)
	}
}

// TestInvalidRecordsAreLeftOut: a record that is invalid on its own (no
// jobId, a duplicate, a negative pid, an unknown state) is left out and
// the others are used (one bad record moved the whole journal aside, with
// every other job's fate and orphans); the file as read is kept aside.
func TestInvalidRecordsAreLeftOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.json")
	data := `{"version":1,"instanceId":"x","pid":1,"writtenAt":1,"jobs":[` +
		`{"jobId":"good","state":"exited"},{"state":"running"},{"jobId":"","state":"running"},{"jobId":"good","state":"running"},` +
		`{"jobId":"neg","state":"running","pid":-5},{"jobId":"zombie","state":"zombie"},{"jobId":"nostate"},{"jobId":"good2","state":"running","pid":7,"pgid":7}]}`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	doc, err := New(path).Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Jobs) != 2 || doc.Jobs[0].JobID != "good" || doc.Jobs[0].State != "exited" || doc.Jobs[1].JobID != "good2" || len(doc.Dropped) != 6 {
		t.Fatalf("kept %+v, dropped %q", doc.Jobs, doc.Dropped)
	}
	if b, err := os.ReadFile(doc.KeptAt); err != nil || string(b) != data {
		t.Fatalf("the file as read was not kept (%q): %v", doc.KeptAt, err)
	}
}

// TestUnreadableJournalMovedAside: a journal that cannot be read (a
// symlink, which is never followed; a directory) is moved aside like a
// corrupt one, so that the first write cannot replace it; one that cannot
// be moved aside either is an error that is not a *CorruptError (the
// supervisor then refuses to start).
func TestUnreadableJournalMovedAside(t *testing.T) {
	for name, make := range map[string]func(path string) error{
		"symlink":   func(path string) error { return os.Symlink("/nonexistent/journal.json", path) },
		"directory": func(path string) error { return os.Mkdir(path, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "journal.json")
			if err := make(path); err != nil {
				t.Fatal(err)
			}
			doc, err := New(path).Load()
			var ce *CorruptError
			if !errors.As(err, &ce) || doc == nil || len(doc.Jobs) != 0 {
				t.Fatalf("Load = %+v, %v; want an empty journal and a *CorruptError", doc, err)
			}
			if _, err := os.Lstat(ce.MovedTo); err != nil || !strings.HasPrefix(filepath.Base(ce.MovedTo), "journal.json.corrupt-") {
				t.Fatalf("moved to %q: %v", ce.MovedTo, err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the unreadable journal is still in place: %v", err)
			}
		})
	}
	t.Run("cannot be moved aside", func(t *testing.T) {
		// A mount point cannot be renamed (EBUSY): bind-mount a directory
		// on the journal's path.
		if os.Geteuid() != 0 {
			t.Skip("needs root to bind-mount (the rename of a mount point fails with EBUSY)")
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "journal.json")
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(t.TempDir(), path, "", syscall.MS_BIND, ""); err != nil {
			t.Skipf("cannot bind-mount here (%v); the rename-fails case is not tested", err)
		}
		defer syscall.Unmount(path, syscall.MNT_DETACH)
		doc, err := New(path).Load()
		var ce *CorruptError
		if err == nil || errors.As(err, &ce) || doc != nil || !strings.Contains(err.Error(), "could not be moved aside") {
			t.Fatalf("Load = %+v, %v; want a plain error saying it could not be moved aside", doc, err)
		}
	})
}

// TestOutOfDescriptorsKeepsJournal: a journal that cannot be opened for a
// reason that says nothing about it (no descriptor left) is not moved
// aside as unusable: the load fails and the file stays where it is.
func TestOutOfDescriptorsKeepsJournal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.json")
	content := mustMarshal(t, &File{Version: Version, InstanceID: "kept", Jobs: []Record{{JobID: "j-1", State: "running"}}})
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	c := startHelper(t, "TestHelperLoader", "loader", dir)
	line, err := c.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	if !strings.HasPrefix(line, "transient ") || !strings.Contains(line, "too many open files") {
		t.Fatalf("helper said %q; want a plain error, out of descriptors", line)
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, content) {
		t.Fatalf("the journal was moved or changed: %v", err)
	}
	if aside, _ := filepath.Glob(path + ".corrupt-*"); len(aside) != 0 {
		t.Fatalf("moved aside: %v", aside)
	}
}

// TestHelperLoader is not a real test: run as a helper process, it loads
// the journal with no file descriptor to spare and says how that went.
func TestHelperLoader(t *testing.T) {
	if os.Getenv(helperEnv) != "loader" {
		return
	}
	helperSetup()
	j := New(filepath.Join(os.Getenv(helperDirEnv), "journal.json"))
	// The runtime's poller needs descriptors of its own once: set it up
	// before none is left.
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Println("error", err)
		return
	}
	defer r.Close()
	defer w.Close()
	// The lowest free descriptor number becomes the limit: the next open
	// would need it.
	free, err := syscall.Dup(0)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	syscall.Close(free)
	lim := syscall.Rlimit{Cur: uint64(free), Max: uint64(free)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		fmt.Println("error", err)
		return
	}
	_, err = j.Load()
	var ce *CorruptError
	switch {
	case err == nil:
		fmt.Println("loaded")
	case errors.As(err, &ce):
		fmt.Println("corrupt", err)
	default:
		fmt.Println("transient", err)
	}
}

// TestFIFOJournalMovedAside: a FIFO where the journal should be does not
// block the load (it waited for a writer for ever): it is moved aside.
func TestFIFOJournalMovedAside(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.json")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := New(path).Load(); done <- err }()
	select {
	case err := <-done:
		var ce *CorruptError
		if !errors.As(err, &ce) {
			t.Fatalf("Load = %v; want a *CorruptError", err)
		}
	case <-time.After(10 * time.Second):
		// (unblock the Load so that the test ends)
		if f, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("Load blocked on a FIFO")
	}
}

// TestLockNotesCleanStop: a holder that stopped cleanly says so to the
// next one (PreviousStopped), once; a holder that did not (a crash: the
// lock just released) leaves nothing said.
func TestLockNotesCleanStop(t *testing.T) {
	dir := t.TempDir()
	acquire := func(inst string) *Lock {
		t.Helper()
		l, err := Acquire(dir, inst)
		if err != nil {
			t.Fatal(err)
		}
		if l.WriteErr != nil {
			t.Fatalf("%s: %v", inst, l.WriteErr)
		}
		return l
	}
	l := acquire("a")
	if l.PreviousStopped {
		t.Fatal("a new lock file says a previous holder stopped")
	}
	if err := l.MarkStopped(); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if b, _ := os.ReadFile(filepath.Join(dir, "lock")); !strings.HasSuffix(string(b), "instance a\nstopped\n") {
		t.Errorf("lock file after a clean stop: %q", b)
	}
	l = acquire("b")
	if !l.PreviousStopped {
		t.Error("the clean stop was not seen")
	}
	l.Release() // (a start that failed before ClearStopped: still noted)
	l = acquire("b2")
	if !l.PreviousStopped {
		t.Error("the clean stop was forgotten by a start that started nothing")
	}
	if err := l.ClearStopped(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "lock")); strings.Contains(string(b), "stopped") {
		t.Errorf("lock file after ClearStopped: %q", b)
	}
	l.Release() // (a crash: no MarkStopped)
	l = acquire("c")
	if l.PreviousStopped {
		t.Error("a holder that did not stop cleanly passed for one that did")
	}
	l.Release()
	// A held lock's owner is its first line only.
	l = acquire("d")
	if err := l.MarkStopped(); err != nil {
		t.Fatal(err)
	}
	var he *HeldError
	if _, err := Acquire(dir, "e"); !errors.As(err, &he) || strings.Contains(he.Owner, "stopped") {
		t.Errorf("second Acquire: %v", err)
	}
	l.Release()
}
