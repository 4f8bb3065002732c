package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"status", "status", 0}, {"stauts", "status", 1}, {"folow", "follow", 1},
		{"lsit", "list", 1}, {"stat", "status", 2}, {"kil", "kill", 1}, {"spwan", "spawn", 1},
		{"abc", "", 3}, {"ca", "abc", 3}, {"héllo", "hello", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	for word, want := range map[string]string{"stauts": "status", "lsit": "list", "stat": "status", "wiat": "wait",
		"frobnicate": "", "x": "", "ls": "", "sotp": "stop", "restrat": "restart", "hist": "history", "st": ""} {
		if got := suggest(word, order); got != want {
			t.Errorf("suggest(%q) = %q, want %q", word, got, want)
		}
	}
}

// TestDidYouMean: a mistyped command or flag is named with what was
// probably meant; a mistyped command gets a one-line hint, not the whole
// usage.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	dir := shortTempDir(t) // (nothing here reaches a supervisor)
	g := []string{"--control", "ipc://" + filepath.Join(dir, "c.sock")}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stauts", "j-1"}, "execctl: unknown command \"stauts\"; did you mean \"status\"?\n  hint: see: execctl --help\n"},
		{[]string{"spawn", "--folow", "--", "true"}, "execctl spawn: unknown flag: --folow; did you mean --follow?\n  hint: see: execctl spawn --help\n"},
		{[]string{"list", "-json"}, "execctl list: unknown shorthand flag: 'j' in -json; did you mean --json?\n"},
		{[]string{"--jsn", "list"}, "execctl: unknown flag: --jsn; did you mean --json?\n"},
		{[]string{"status", "--contrl", "ipc:///x"}, "execctl status: unknown flag: --contrl; did you mean --control?\n"},
		{[]string{"list", "--bogus-flag"}, "execctl list: unknown flag: --bogus-flag\n"},
	} {
		code, out, errs := execctl(t, append(append([]string{}, g...), tc.args...)...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errs, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant it to start with:\n%s", tc.args, code, out, errs, tc.want)
		}
	}
}
