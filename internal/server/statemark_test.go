package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateMark: a state directory's mark is made once and kept; a file
// that holds none (damaged, a directory, a symlink) is moved aside and a
// new mark made.
func TestStateMark(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, stateMarkFile)
	m1, moved, err := loadStateMark(dir, false)
	if err != nil || moved != "" || !validStateMark(m1) {
		t.Fatalf("first: %q %q %v", m1, moved, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mark file: %v %v", fi, err)
	}
	if m2, moved, err := loadStateMark(dir, false); err != nil || moved != "" || m2 != m1 {
		t.Fatalf("again: %q %q %v, want %q kept", m2, moved, err, m1)
	}
	m2, moved, err := loadStateMark(dir, true)
	if err != nil || moved != "" || !validStateMark(m2) || m2 == m1 {
		t.Fatalf("renewed: %q %q %v, want a new mark", m2, moved, err)
	}
	if m3, _, _ := loadStateMark(dir, false); m3 != m2 {
		t.Fatalf("after renewal: %q, want %q kept", m3, m2)
	}
	m1 = m2
	other := t.TempDir()
	if m3, _, _ := loadStateMark(other, false); m3 == m1 {
		t.Fatal("two state directories share a mark")
	}
	for name, damage := range map[string]func(){
		"garbage":   func() { os.WriteFile(path, []byte("not a mark\n"), 0o600) },
		"uppercase": func() { os.WriteFile(path, []byte(strings.ToUpper(m1)+"\n"), 0o600) },
		"empty":     func() { os.WriteFile(path, nil, 0o600) },
		"directory": func() { os.Mkdir(path, 0o700) },
		"symlink":   func() { os.Symlink(filepath.Join(other, stateMarkFile), path) },
	} {
		os.RemoveAll(path)
		damage()
		m, moved, err := loadStateMark(dir, false)
		if err != nil || moved == "" || !validStateMark(m) || m == m1 {
			t.Errorf("%s: %q moved to %q, %v; want a new mark, the file moved aside", name, m, moved, err)
			continue
		}
		if _, err := os.Lstat(moved); err != nil {
			t.Errorf("%s: moved-aside file: %v", name, err)
		}
		if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != m {
			t.Errorf("%s: file holds %q, want %q", name, b, m)
		}
	}
}
