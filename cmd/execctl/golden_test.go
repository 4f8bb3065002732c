package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// normalize replaces what changes from run to run (ids, pids, times,
// durations, paths) with stable placeholders, keeping the layout.
func normalize(s string, ids map[string]string) string {
	for id, name := range ids {
		s = strings.ReplaceAll(s, id, name)
	}
	rules := []struct{ re, to string }{
		{`"(pid|pgid)": ?\d+`, `"$1": PID`},
		{`"(createdAt|startedAt|endedAt|lastOutputAt|sampledAt)": ?\d+`, `"$1": TIME`},
		{`"durationMs": ?\d+`, `"durationMs": MS`},
		{`"ownership": ?"(cgroup|pgid)"`, `"ownership": "MODE"`}, // depends on the machine
		{`(ownership:\s+)(cgroup|pgid)`, `${1}MODE`},
		{`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}`, `DATE TIME`},
		{`\b\d+(\.\d+)?(ms|s|µs)\b`, `DUR`},
		{`(pid:\s+)\d+`, `${1}PID`},
		{`(exited|running|exiting) +\d+ `, `$1 PID `},
		{` {2,}`, `  `}, // column widths follow the values replaced above
	}
	for _, r := range rules {
		s = regexp.MustCompile(r.re).ReplaceAllString(s, r.to)
	}
	return s
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run: go test ./cmd/execctl -run TestGolden -update)", err)
	}
	if string(want) != got {
		t.Fatalf("%s differs from %s (regenerate with -update if intended):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

// TestGoldenOutput pins execctl's human tables and JSON for finished jobs.
func TestGoldenOutput(t *testing.T) {
	s := startSupervisor(t)
	a := s.spawnID(t, "--name", "hello", "--label", "team=infra", "--", "sh", "-c", "echo hello; exit 2")
	b := s.spawnID(t, "--shell", "echo err >&2")
	s.waitExited(t, a)
	s.waitExited(t, b)
	ids := map[string]string{a: "JOB-A", b: "JOB-B"}
	golden(t, "status", normalize(s.mustCtl(t, "status", a), ids))
	golden(t, "status-json", normalize(s.mustCtl(t, "--json", "status", a), ids))
	golden(t, "list", normalize(s.mustCtl(t, "list"), ids))
	golden(t, "poll", normalize(s.mustCtl(t, "poll", a), ids))
	golden(t, "kill-finished", normalize(s.mustCtl(t, "kill", a), ids))
}
