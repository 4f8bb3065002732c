package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTempFileRace: a name someone made first (a symlink to a file of
// ours, a file) is never written through: the write takes the next
// name; when every name tried is taken it fails and the journal stays.
func TestTempFileRace(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "journal.json")
	target := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(target, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	names := []string{"planted-link", "planted-file", "free"}
	next := 0
	j := New(path)
	j.tempName = func(p string) string {
		n := names[next%len(names)]
		next++
		return filepath.Join(filepath.Dir(p), tempPrefix(p)+n)
	}
	if err := os.Symlink(target, filepath.Join(dir, tempPrefix(path)+"planted-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, tempPrefix(path)+"planted-file"), []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := j.Save(sampleFile()); err != nil {
		t.Fatalf("Save past two taken names: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "mine" {
		t.Fatalf("written through the planted symlink: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, tempPrefix(path)+"planted-file")); string(b) != "theirs" {
		t.Fatalf("the planted file was written: %q", b)
	}
	if doc, err := j.Load(); err != nil || len(doc.Jobs) != len(sampleFile().Jobs) {
		t.Fatalf("journal after the race: %v", err)
	}

	// Every name taken: the write fails, the journal is what it was.
	before, _ := os.ReadFile(path)
	j.tempName = func(p string) string { return filepath.Join(filepath.Dir(p), tempPrefix(p)+"planted-link") }
	err := j.Save(&File{InstanceID: "other"})
	if !errors.Is(err, ErrTempNamesTaken) {
		t.Fatalf("Save with every name taken: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("the journal changed")
	}
	if b, _ := os.ReadFile(target); string(b) != "mine" {
		t.Fatalf("written through the planted symlink: %q", b)
	}
}

// TestRandomTempNames: temp names are 128 random bits, never reused.
func TestRandomTempNames(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		n := randomTempName("/x/journal.json")
		tail, ok := strings.CutPrefix(n, "/x/.journal.json.tmp-")
		if !ok || len(tail) != 32 || seen[n] {
			t.Fatalf("temp name %q", n)
		}
		seen[n] = true
	}
}

// TestLeftoversOfOthersStay: Load removes the temp files a crash of ours
// left, not what another user (or a symlink) has under such a name.
func TestLeftoversOfOthersStay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a file of another user")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.json")
	ours := filepath.Join(dir, tempPrefix(path)+"ours")
	theirs := filepath.Join(dir, tempPrefix(path)+"theirs")
	link := filepath.Join(dir, tempPrefix(path)+"link")
	for _, p := range []string{ours, theirs} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	if _, err := New(path).Load(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("our leftover stays: %v", err)
	}
	for _, p := range []string{theirs, link} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// TestMoveAsideNeverReplaces: a journal moved aside never replaces what
// is at the name it goes to (someone may have made it first): it goes
// to that name with a random tail.
func TestMoveAsideNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.json")
	taken := path + ".corrupt-x"
	for p, data := range map[string]string{path: "bad", taken: "theirs"} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := renameNoReplace(path, taken)
	if err != nil || got == taken || !strings.HasPrefix(got, taken+"-") {
		t.Fatalf("moved to %q, %v", got, err)
	}
	if b, _ := os.ReadFile(taken); string(b) != "theirs" {
		t.Fatalf("the taken name was replaced: %q", b)
	}
	if b, _ := os.ReadFile(got); string(b) != "bad" {
		t.Fatalf("moved copy: %q", b)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal still there: %v", err)
	}
}

// TestReadChangesNothing: Read, for someone looking while a supervisor
// writes, leaves a write's temp file and a corrupt journal where they
// are (Load, recovery, would remove the one and move the other aside).
func TestReadChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.json")
	if err := New(path).Save(sampleFile()); err != nil {
		t.Fatal(err)
	}
	temp := filepath.Join(dir, tempPrefix(path)+"in-flight")
	if err := os.WriteFile(temp, []byte("half a write"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc, err := Read(path)
	if err != nil || len(doc.Jobs) != len(sampleFile().Jobs) {
		t.Fatalf("Read: %+v, %v", doc, err)
	}
	if _, err := os.Lstat(temp); err != nil {
		t.Fatalf("a write's temp file went: %v", err)
	}

	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err == nil {
		t.Fatal("a corrupt journal read without error")
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "{not json" {
		t.Fatalf("the corrupt journal was moved or changed: %q, %v", b, err)
	}
	if _, err := Read(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing journal: %v", err)
	}
}
