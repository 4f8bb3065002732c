package client

import (
	"bytes"
	"testing"
)

// TestKeyBytes: names, Ctrl with letters and punctuation, Alt/Meta as
// Escape then the key, single characters as typed; an unknown name is an
// error. (C-\, Shift-Tab, Alt-x and single characters were "unknown"
// keys: found by a PTY audit.)
func TestKeyBytes(t *testing.T) {
	for name, want := range map[string]string{
		"Enter": "\r", "C-c": "\x03", "ctrl-D": "\x04", "^z": "\x1a",
		"C-\\": "\x1c", "C-]": "\x1d", "C-[": "\x1b", "C-@": "\x00", "C-_": "\x1f",
		"Shift-Tab": "\x1b[Z", "M-x": "\x1bx", "Alt-Enter": "\x1b\r", "Alt-X": "\x1bX",
		"G": "G", "q": "q", "é": "é", "meta+x": "\x1bx",
	} {
		got, err := KeyBytes(name)
		if err != nil || !bytes.Equal(got, []byte(want)) {
			t.Errorf("%q: %q, %v; want %q", name, got, err, want)
		}
	}
	for _, bad := range []string{"nosuchkey", "C-1", "Alt-nosuch", "", "\xff"} {
		if _, err := KeyBytes(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
