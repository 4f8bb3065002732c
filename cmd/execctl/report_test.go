package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// jsonError returns the "error" object of execctl --json's stderr, which
// must be that one line.
func jsonError(t *testing.T, stderr string) map[string]any {
	t.Helper()
	if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
		t.Fatalf("want one line on stderr, got:\n%s", stderr)
	}
	e, ok := jsonObject(t, stderr)["error"].(map[string]any)
	if !ok {
		t.Fatalf("no \"error\" object: %s", stderr)
	}
	for _, k := range []string{"code", "message"} {
		if s, _ := e[k].(string); s == "" {
			t.Fatalf("error without %s: %s", k, stderr)
		}
	}
	return e
}

// TestJSONErrors: with --json (wherever it is, even after the mistake),
// an error is one JSON object on stderr: its code (the supervisor's, or
// execctl's own), message, hint and exit code.
func TestJSONErrors(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	dead := "ipc://" + filepath.Join(shortTempDir(t), "c.sock")
	for _, tc := range []struct {
		args        []string
		code        string
		exit        int
		hint, inMsg string
	}{
		{[]string{"--json", "status", "j-0000000000000000"}, "not-found", 4, "execctl list", "j-0000000000000000"},
		{[]string{"kill", "j-0000000000000000", "--json"}, "not-found", 4, "execctl list", ""},
		{[]string{"--json", "spawn", "--wait", "--", "/nonexistent/ectl-no-such-binary"}, "spawn-error", 127, "", "ectl-no-such-binary"},
		{[]string{"--json", "list", "--state", "bogus"}, "usage", 2, "", "--state"},
		{[]string{"list", "--bogus", "--json"}, "usage", 2, "list --help", "--bogus"},
		{[]string{"stauts", "--json"}, "usage", 2, "execctl --help", `did you mean "status"`},
		{[]string{"--json"}, "usage", 2, "execctl --help", "no command"},
		{[]string{"--json", "--jsno", "list"}, "usage", 2, "", "--json?"},
		{[]string{"--json", "health", "--control", dead}, "unreachable", 3, "is the supervisor running?", ""},
	} {
		args := tc.args
		if tc.code != "unreachable" {
			args = append(s.globals(), args...)
		}
		code, out, errs := execctl(t, args...)
		if code != tc.exit || out != "" {
			t.Errorf("%q: exit %d (want %d), stdout %q", tc.args, code, tc.exit, out)
			continue
		}
		e := jsonError(t, errs)
		hint, _ := e["hint"].(string)
		if e["code"] != tc.code || e["exitCode"] != float64(tc.exit) || !strings.Contains(hint, tc.hint) || !strings.Contains(e["message"].(string), tc.inMsg) {
			t.Errorf("%q: %s", tc.args, errs)
		}
	}
	// Without --json: text, the supervisor's code in parentheses.
	code, _, errs := s.ctl(t, "status", "j-0000000000000000")
	if code != 4 || !strings.HasPrefix(errs, "execctl status: ") || !strings.Contains(errs, "(not-found)\n  hint: list known jobs with: execctl list\n") {
		t.Fatalf("status of no job: exit %d, stderr %q", code, errs)
	}
}

func TestJSONAmong(t *testing.T) {
	for args, want := range map[string]bool{"--json": true, "a --json b": true, "--json=true": true, "--json=1": true,
		"--json=false": false, "--json --json=false": false, "-- --json": false, "--jsonx": false, "": false, "--json=bogus": false} {
		if got := jsonAmong(strings.Fields(args)); got != want {
			t.Errorf("jsonAmong(%q) = %v, want %v", args, got, want)
		}
	}
}
