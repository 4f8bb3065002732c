package notify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDirRefusesPlantedPaths: a notify directory that is a symlink (to
// anywhere), not a directory, someone else's or writable by others is
// refused, naming it, and nothing is ever made where a symlink points; a
// missing one is made private by EnsureDir (CheckDir makes nothing).
func TestDirRefusesPlantedPaths(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	plant := map[string]func(p string) error{
		"symlink":      func(p string) error { return os.Symlink(target, p) },
		"dangling":     func(p string) error { return os.Symlink(filepath.Join(base, "nowhere"), p) },
		"regular file": func(p string) error { return os.WriteFile(p, nil, 0o600) },
		"writable by others": func(p string) error {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chmod(p, 0o777)
		},
	}
	if os.Geteuid() == 0 {
		plant["someone else's"] = func(p string) error {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		}
	}
	for name, put := range plant {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "notify")
			if err := put(dir); err != nil {
				t.Fatal(err)
			}
			for fn, f := range map[string]func(string) error{"CheckDir": CheckDir, "EnsureDir": EnsureDir} {
				if err := f(dir); err == nil || !strings.Contains(err.Error(), dir) {
					t.Fatalf("%s: %v; want an error naming %s", fn, err, dir)
				}
			}
			if ents, _ := os.ReadDir(target); len(ents) != 0 {
				t.Fatalf("made in the symlink's target: %v", ents)
			}
			if _, err := os.Lstat(filepath.Join(base, "nowhere")); err == nil {
				t.Fatal("the dangling symlink's target was made")
			}
		})
	}
	dir := filepath.Join(t.TempDir(), "notify")
	if err := CheckDir(dir); err != nil {
		t.Fatalf("missing: %v", err)
	}
	if _, err := os.Lstat(dir); err == nil {
		t.Fatal("CheckDir made it")
	}
	if err := EnsureDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made: %v %v", fi, err)
	}
	if err := EnsureDir(dir); err != nil {
		t.Fatalf("again: %v", err)
	}
}
