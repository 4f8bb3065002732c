package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: a directory of ours, closed to others, passes; one others
// can write to, a symlink and a file do not (each an *UnsafePathError
// naming it and its real mode); sticky passes only where allowed.
func TestCheck(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, mode os.FileMode) string {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := Check(mk("own", 0o755), false); err != nil {
		t.Fatalf("own 755: %v", err)
	}
	open := mk("open", 0o777)
	var upe *UnsafePathError
	if err := Check(open, false); !errors.As(err, &upe) || upe.Path != open || !strings.Contains(err.Error(), "mode 777") {
		t.Fatalf("open 777: %v", err)
	}
	sticky := mk("sticky", os.ModeSticky|0o777)
	if err := Check(sticky, true); err != nil {
		t.Fatalf("sticky where allowed: %v", err)
	}
	if err := Check(sticky, false); err == nil || !strings.Contains(err.Error(), "mode 1777") {
		t.Fatalf("sticky where not allowed: %v", err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(open, link); err != nil {
		t.Fatal(err)
	}
	if err := Check(link, true); !errors.As(err, &upe) {
		t.Fatalf("symlink: %v", err)
	}
	if err := EnsurePrivate(filepath.Join(root, "new")); err != nil {
		t.Fatalf("EnsurePrivate of a new directory: %v", err)
	}
	if err := EnsurePrivate(open); !errors.As(err, &upe) {
		t.Fatalf("EnsurePrivate of an open directory: %v", err)
	}
}

// TestReadToken: a token file of ours, 0600, is read (trimmed); one
// others can read, an empty one, a symlink are refused.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := ReadToken(p); err != nil || tok != "s3cret" {
		t.Fatalf("ReadToken: %q, %v", tok, err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadToken(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a token others can read: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadToken(empty); err == nil {
		t.Fatal("an empty token was read")
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadToken(link); err == nil {
		t.Fatal("a token read through a symlink")
	}
}
