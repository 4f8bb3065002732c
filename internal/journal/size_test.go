package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestNeverWritesWhatLoadRefuses: a document larger than MaxFileBytes
// (which Load would take for corrupt and move aside, every record lost)
// is not written: ErrTooLarge, a failure counted, the previous journal
// in place and still loading.
func TestNeverWritesWhatLoadRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.json")
	j := New(path)
	rec := []byte(`{"jobId":"j-1","pid":10,"pgid":10,"startTicks":1,"bootId":"b","state":"running","createdAt":1,"startedAt":1,"updatedAt":1,"lastOutputAt":1,"instanceId":"i","stdoutBytes":0,"stderrBytes":0,"outputEnd":0,"lastSeq":1,"timeoutMs":0,"noOutputTimeoutMs":0}`)
	if err := j.SaveEncoded(&File{InstanceID: "i", Pid: 1}, [][]byte{rec}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// 257 records of 1 MiB (one buffer shared: nothing of that size is
	// allocated when the write is refused up front).
	big := bytes.Repeat([]byte{' '}, 1<<20)
	big[0] = '{'
	big[len(big)-1] = '}'
	jobs := make([][]byte, MaxFileBytes/(1<<20)+1)
	for i := range jobs {
		jobs[i] = big
	}
	err = j.SaveEncoded(&File{InstanceID: "i", Pid: 1}, jobs)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("SaveEncoded of %d MiB: %v; want ErrTooLarge", len(jobs), err)
	}
	if j.Failures.Load() != 1 || j.Writes.Load() != 1 {
		t.Fatalf("writes %d, failures %d; want 1, 1", j.Writes.Load(), j.Failures.Load())
	}
	after, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the previous journal was replaced (%v)", err)
	}
	doc, err := j.Load()
	if err != nil || len(doc.Jobs) != 1 || doc.Jobs[0].JobID != "j-1" {
		t.Fatalf("the previous journal does not load: %v", err)
	}
	if olds, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".journal.json.tmp-*")); len(olds) != 0 {
		t.Fatalf("temp files left: %v", olds)
	}
}
