package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/limits"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestMain fails the run when a test left a live child process behind
// (every job is a child of this process: the server runs in-process).
func TestMain(m *testing.M) {
	limits.MaybeRunHelper() // jobs with rlimits start through this binary
	os.Exit(proctest.RunWithoutLeaks(m))
}

// shortTempDir returns a fresh directory with a short path (unix socket
// paths must stay under ~100 bytes), removed when the test ends.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ectl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// supervisor is a real server on private ipc endpoints.
type supervisor struct {
	control, event string
	dir            string
	srv            *server.Server
}

// client returns a pkg/client Client of s, closed when t ends.
func (s *supervisor) client(t *testing.T) *client.Client {
	t.Helper()
	c := client.New(client.Options{ControlAddress: s.control, EventAddress: s.event, RequestTimeout: 10 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// globals returns the global flags that point execctl at s.
func (s *supervisor) globals() []string {
	return []string{"--control", s.control, "--event", s.event}
}

func startSupervisor(t *testing.T) *supervisor { return startSupervisorWith(t, nil) }

// startSupervisorWith is startSupervisor with the configuration tweaked.
func startSupervisorWith(t *testing.T, tweak func(*server.Config)) *supervisor {
	t.Helper()
	dir := shortTempDir(t)
	cfg := server.DefaultConfig()
	cfg.Control = "ipc://" + filepath.Join(dir, "c.sock")
	cfg.Event = "ipc://" + filepath.Join(dir, "e.sock")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.MetricsAddr = ""
	cfg.CPUHome = false // (per process: this one runs several servers, and its tests)
	cfg.Jobs.MergeInterval = 20 * time.Millisecond
	cfg.Jobs.Grace = 2 * time.Second
	cfg.HeartbeatInterval = 200 * time.Millisecond
	cfg.Subreaper = false // the test process waits for children of its own
	if exe, err := os.Executable(); err == nil {
		cfg.LimitsHelper = exe // TestMain runs limits.MaybeRunHelper
	}
	if tweak != nil {
		tweak(&cfg)
	}
	log := slog.New(slog.DiscardHandler)
	s, err := server.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil { // terminates any job still running
			t.Errorf("close server: %v", err)
		}
	})
	return &supervisor{control: cfg.Control, event: cfg.Event, dir: dir, srv: s}
}

// execctl runs the CLI in-process and returns its exit code and output.
func execctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out, errb proctest.Buffer
	code = run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// ctl runs execctl against s with the given arguments after the globals.
func (s *supervisor) ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return execctl(t, append(s.globals(), args...)...)
}

// mustCtl is ctl that fails the test unless execctl exits 0.
func (s *supervisor) mustCtl(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := s.ctl(t, args...)
	if code != 0 {
		t.Fatalf("execctl %q: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out
}

// spawnID starts a job with `execctl spawn ARGS` and returns its id.
func (s *supervisor) spawnID(t *testing.T, args ...string) string {
	t.Helper()
	id := strings.TrimSpace(s.mustCtl(t, append([]string{"spawn"}, args...)...))
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("spawn printed %q, want one job id", id)
	}
	return id
}

// jsonObject decodes one JSON object printed by execctl --json.
func jsonObject(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, s)
	}
	if dec.More() {
		t.Fatalf("want exactly one JSON object, got more:\n%s", s)
	}
	return m
}

// jobOf returns the "job" object of a status/spawn reply.
func jobOf(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	job, ok := m["job"].(map[string]any)
	if !ok {
		t.Fatalf("no \"job\" object in %v", m)
	}
	return job
}

// jsonStatus returns the "job" object of `execctl --json status ID`.
func (s *supervisor) jsonStatus(t *testing.T, id string) map[string]any {
	t.Helper()
	return jobOf(t, jsonObject(t, s.mustCtl(t, "--json", "status", id)))
}

// waitExited polls `execctl --json status ID` until the job is exited, for
// at most 10 s, and returns its final "job" object.
func (s *supervisor) waitExited(t *testing.T, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		job := s.jsonStatus(t, id)
		if job["state"] == "exited" {
			return job
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not exited after 10s: %v", id, job)
		}
		time.Sleep(20 * time.Millisecond) // polling a CLI: there is nothing to block on
	}
}

func TestSpawnFollowPrintsOutputAndExitCode(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	code, out, errs := s.ctl(t, "spawn", "--follow", "--", "sh", "-c", "echo hi; exit 3")
	if code != 3 || out != "hi\n" {
		t.Fatalf("exit %d stdout %q (want 3, %q); stderr %q", code, out, "hi\n", errs)
	}
}

func TestSpawnWaitExitCodes(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"exit code", []string{"--wait", "--shell", "exit 5"}, 5, ""},
		{"killed by signal", []string{"--wait", "--shell", "kill -9 $$"}, 128 + 9, "SIGKILL"},
		{"timeout", []string{"--wait", "--timeout", "200ms", "--", "sleep", "30"}, 124, "overall-timeout"},
		{"missing binary", []string{"--wait", "--", "/nonexistent/ectl-no-such-binary"}, 127, "spawn-error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := s.ctl(t, append([]string{"spawn"}, tc.args...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errs)
			}
			if out != "" {
				t.Errorf("--wait printed %q to stdout, want nothing", out)
			}
			if !strings.Contains(errs, tc.stderr) {
				t.Errorf("stderr %q does not mention %q", errs, tc.stderr)
			}
			// (the job's id, to look at its output: --wait shows none)
			if tc.code != 127 && !strings.Contains(errs, "execctl poll j-") {
				t.Errorf("stderr %q does not name the job", errs)
			}
		})
	}
}

func TestJSONSpawnStatusKill(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	spawned := jsonObject(t, s.mustCtl(t, "--json", "spawn", "--", "sleep", "30"))
	id, ok := spawned["jobId"].(string)
	if !ok || id == "" {
		t.Fatalf("no \"jobId\" in %v", spawned)
	}
	if got := jobOf(t, spawned)["jobId"]; got != id {
		t.Fatalf("job.jobId %v != jobId %q", got, id)
	}

	job := s.jsonStatus(t, id)
	if pid, _ := job["pid"].(float64); pid <= 0 {
		t.Fatalf("job.pid = %v, want > 0 (%v)", job["pid"], job)
	}
	if job["state"] != "running" {
		t.Fatalf("job.state = %v, want running (%v)", job["state"], job)
	}

	if out := s.mustCtl(t, "kill", id); !strings.HasPrefix(out, id+" ") {
		t.Fatalf("kill printed %q", out)
	}
	job = s.waitExited(t, id)
	if job["reason"] != "manual-cancel" {
		t.Fatalf("job.reason = %v, want manual-cancel (%v)", job["reason"], job)
	}
	// Killing it again is harmless and says so.
	if out := s.mustCtl(t, "kill", id); !strings.Contains(out, "already ended (manual-cancel)") {
		t.Fatalf("second kill printed %q", out)
	}
}

// TestKillSeveral: kill takes several jobs, ends them together, and
// reports each in the order given; one that is not known is reported
// and the others are still killed (exit status of the failure).
func TestKillSeveral(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	var ids []string
	for range 3 {
		// (each ignores SIGTERM: only the SIGKILL asked for ends it)
		spawned := jsonObject(t, s.mustCtl(t, "--json", "spawn", "--grace", "60s", "--shell", "trap '' TERM; sleep 60 & wait"))
		ids = append(ids, spawned["jobId"].(string))
	}
	out := s.mustCtl(t, "kill", "--signal", "SIGKILL", ids[0], ids[1])
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], ids[0]+" ") || !strings.HasPrefix(lines[1], ids[1]+" ") {
		t.Fatalf("kill of two printed %q", out)
	}
	for _, id := range ids[:2] {
		s.waitExited(t, id)
	}
	missing := "j-00000000deadbeef"
	code, out, errs := s.ctl(t, "kill", "--signal", "SIGKILL", missing, ids[2])
	if code == 0 || !strings.Contains(errs, "1 of 2 kills failed") || !strings.Contains(errs, missing) || !strings.HasPrefix(out, ids[2]+" ") {
		t.Fatalf("kill of an unknown job and a running one: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	s.waitExited(t, ids[2])

	// By label: every job not yet ended with it, and no other.
	var team []string
	for _, l := range []string{"team=a", "team=a", "team=b"} {
		spawned := jsonObject(t, s.mustCtl(t, "--json", "spawn", "--label", l, "--", "sleep", "60"))
		team = append(team, spawned["jobId"].(string))
	}
	out = s.mustCtl(t, "kill", "--signal", "SIGKILL", "--label", "team=a")
	if strings.Count(out, "\n") != 2 || !strings.Contains(out, team[0]) || !strings.Contains(out, team[1]) {
		t.Fatalf("kill --label team=a printed %q", out)
	}
	s.waitExited(t, team[0])
	s.waitExited(t, team[1])
	if job := s.jsonStatus(t, team[2]); job["state"] != "running" {
		t.Fatalf("the job labelled team=b: %v", job)
	}
	if code, _, errs := s.ctl(t, "kill", "--label", "team=b", team[2]); code == 0 || !strings.Contains(errs, "not both") {
		t.Fatalf("kill with JOBs and --label: exit %d, %q", code, errs)
	}
	if code, _, errs := s.ctl(t, "kill", "--label", "team=nobody"); code != 0 || !strings.Contains(errs, "no job not yet ended") {
		t.Fatalf("kill --label matching nothing: exit %d, %q", code, errs)
	}
	s.mustCtl(t, "kill", "--signal", "SIGKILL", team[2])
}

func TestJSONListAndHealth(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	list := jsonObject(t, s.mustCtl(t, "--json", "list"))
	jobs, ok := list["jobs"].([]any)
	if !ok || len(jobs) != 0 {
		t.Fatalf("empty list: want {\"jobs\":[]}, got %v", list)
	}

	code, _, errs := s.ctl(t, "spawn", "--wait", "--", "true")
	if code != 0 {
		t.Fatalf("spawn --wait true: exit %d: %s", code, errs)
	}
	list = jsonObject(t, s.mustCtl(t, "--json", "list"))
	jobs, ok = list["jobs"].([]any)
	if !ok || len(jobs) != 1 {
		t.Fatalf("want one job in %v", list)
	}
	if j, _ := jobs[0].(map[string]any); j == nil || j["state"] != "exited" || j["reason"] != "exit" {
		t.Fatalf("listed job: %v", jobs[0])
	}

	h := jsonObject(t, s.mustCtl(t, "--json", "health"))
	if h["ok"] != true {
		t.Fatalf("health.ok = %v (%v)", h["ok"], h)
	}
	if id, _ := h["instanceId"].(string); id == "" {
		t.Fatalf("health.instanceId missing (%v)", h)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	// None of these reaches a supervisor; point at a dead endpoint so a
	// mistake here would show up as exit 3, not hang or pass.
	dir := shortTempDir(t)
	g := []string{"--control", "ipc://" + filepath.Join(dir, "c.sock"), "--event", "ipc://" + filepath.Join(dir, "e.sock")}
	cases := []struct {
		name string
		args []string
		want []string // substrings of stderr
	}{
		{"no command", nil, []string{"usage: execctl", "spawn"}},
		{"unknown command", []string{"frobnicate"}, []string{"unknown command \"frobnicate\"\n  hint: see: execctl --help"}},
		{"spawn without argv", []string{"spawn"}, []string{"no command given", "hint: execctl spawn -- echo hello"}},
		{"spawn with only flags", []string{"spawn", "--wait"}, []string{"no command given", "hint:"}},
		{"poll without job", []string{"poll"}, []string{"want exactly one JOB", "hint:"}},
		{"env without =", []string{"spawn", "--env", "FOO", "--", "true"}, []string{`--env "FOO": want KEY=VALUE`, "hint:"}},
		{"bad flag", []string{"spawn", "--no-such-flag"}, []string{"unknown flag", "hint:"}},
		{"bad global flag", []string{"--no-such-flag", "health"}, []string{"unknown flag: --no-such-flag", "hint: see: execctl --help"}},
		{"bad global flag value", []string{"--request-timeout", "soon", "health"}, []string{"--request-timeout", "hint:"}},
		{"restart tuning without --restart", []string{"spawn", "--max-restarts", "3", "--", "true"},
			[]string{"--max-restarts only applies to services", "hint: add --restart on-failure"}},
		{"restart tuning with --restart never", []string{"spawn", "--restart", "never", "--restart-delay", "1s", "--backoff-multiplier", "3", "--", "true"},
			[]string{"--restart-delay, --backoff-multiplier only applies to services", "--restart never", "hint:"}},
		{"bad restart policy", []string{"spawn", "--restart", "sometimes", "--", "true"}, []string{`--restart "sometimes": want never, on-failure or always`}},
		{"negative restart delay", []string{"spawn", "--restart", "always", "--restart-delay", "-1s", "--", "true"}, []string{"--restart-delay -1s: durations must not be negative"}},
		{"sub-millisecond delay", []string{"spawn", "--restart", "always", "--restart-delay", "10us", "--", "true"}, []string{"--restart-delay 10µs: less than"}},
		{"negative max restarts", []string{"spawn", "--restart", "always", "--max-restarts", "-1", "--", "true"}, []string{"--max-restarts -1: must not be negative"}},
		{"watchdog without notify", []string{"spawn", "--watchdog", "1s", "--", "true"}, []string{"--watchdog needs --notify", "hint:"}},
		{"bad size suffix", []string{"spawn", "--limit-as", "1X", "--", "true"}, []string{`--limit-as "1X": want a size in bytes`, "hint: suffixes K, M, G"}},
		{"bad memory size", []string{"spawn", "--memory-max", "lots", "--", "true"}, []string{`--memory-max "lots"`}},
		{"start without job", []string{"start"}, []string{"want exactly one JOB"}},
		{"restart with two jobs", []string{"restart", "a", "b"}, []string{"want exactly one JOB"}},
		{"stop without job", []string{"stop"}, []string{"want exactly one JOB"}},
		{"history without job", []string{"history"}, []string{"want exactly one JOB"}},
		{"history negative lines", []string{"history", "--lines", "-1", "j-x"}, []string{"--lines -1: must not be negative"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := execctl(t, append(append([]string{}, g...), tc.args...)...)
			if code != 2 {
				t.Fatalf("exit %d, want 2\nstdout: %s\nstderr: %s", code, out, errs)
			}
			for _, w := range tc.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr does not mention %q:\n%s", w, errs)
				}
			}
		})
	}
}

func TestUnreachableSupervisor(t *testing.T) {
	t.Parallel()
	dir := shortTempDir(t)
	control := "ipc://" + filepath.Join(dir, "nobody.sock")
	// (wait too: it rides out a supervisor restart only once it reached one)
	for _, args := range [][]string{{"health"}, {"list"}, {"spawn", "--", "true"}, {"wait", "j-0000000000000001"}} {
		start := time.Now()
		code, out, errs := execctl(t, append([]string{"--control", control, "--event", "ipc://" + filepath.Join(dir, "nobody-e.sock")}, args...)...)
		if code != 3 {
			t.Fatalf("%v: exit %d, want 3\nstdout: %s\nstderr: %s", args, code, out, errs)
		}
		if !strings.Contains(errs, "exec-supervisor --control "+control) {
			t.Fatalf("%v: stderr does not say how to start a supervisor:\n%s", args, errs)
		}
		bound := 5 * time.Second
		if args[0] == "wait" {
			bound += firstReachFor // (it gives a restarting supervisor that long on purpose)
		}
		if d := time.Since(start); d > bound {
			t.Errorf("%v: took %v to notice nobody is listening (at most %v)", args, d, bound)
		}
	}
}

// prefixedLines checks that every line of out is "ID | text" for an id of
// ids and returns the texts per id, in order.
func prefixedLines(t *testing.T, out string, ids ...string) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("output does not end in a newline: %q", out)
	}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		matched := false
		for _, id := range ids {
			if text, ok := strings.CutPrefix(line, id+" | "); ok {
				got[id] = append(got[id], text)
				matched = true
				break
			}
		}
		if !matched {
			t.Fatalf("line %q has no \"JOBID | \" prefix of %v; output:\n%s", line, ids, out)
		}
	}
	return got
}

func TestLogs(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)

	t.Run("finished jobs", func(t *testing.T) {
		a := s.spawnID(t, "--shell", "echo a-one; echo a-two")
		// Both lines on stdout: the order of stdout vs stderr output is
		// whatever the supervisor happened to read first.
		b := s.spawnID(t, "--shell", "echo b-one; echo b-two")
		s.waitExited(t, a)
		s.waitExited(t, b)
		code, out, errs := s.ctl(t, "logs", a, b)
		if code != 0 {
			t.Fatalf("logs: exit %d: %s", code, errs)
		}
		got := prefixedLines(t, out, a, b)
		if strings.Index(out, "b-one") < strings.Index(out, "a-two") {
			t.Errorf("logs A B: B's output before the end of A's:\n%s", out)
		}
		if want := []string{"a-one", "a-two"}; fmt.Sprint(got[a]) != fmt.Sprint(want) {
			t.Errorf("%s: lines %q, want %q\n%s", a, got[a], want, out)
		}
		if want := []string{"b-one", "b-two"}; fmt.Sprint(got[b]) != fmt.Sprint(want) {
			t.Errorf("%s: lines %q, want %q\n%s", b, got[b], want, out)
		}
	})

	t.Run("follow running job", func(t *testing.T) {
		gate := filepath.Join(s.dir, "go")
		script := fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done; echo l1; echo l2; echo l3", gate)
		id := s.spawnID(t, "--shell", script)
		if st := s.jsonStatus(t, id)["state"]; st != "running" {
			t.Fatalf("job state %v before the gate opened, want running", st)
		}
		done := bgCtl(t, append(s.globals(), "logs", "-f", id)...)
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.code != 0 {
			t.Fatalf("logs -f: exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.errs)
		}
		got := prefixedLines(t, r.out, id)
		if want := []string{"l1", "l2", "l3", "[ended: exit code 0]"}; fmt.Sprint(got[id]) != fmt.Sprint(want) {
			t.Fatalf("logs -f lines %q, want %q\n%s", got[id], want, r.out)
		}
	})
}

func TestPollRemoveStatus(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--shell", "echo out-line; echo err-line >&2")
	s.waitExited(t, id)

	code, out, errs := s.ctl(t, "poll", id)
	if code != 0 || out != "out-line\n" || errs != "err-line\n" {
		t.Fatalf("poll: exit %d stdout %q stderr %q", code, out, errs)
	}

	// A running job cannot be removed.
	running := s.spawnID(t, "--", "sleep", "30")
	code, _, errs = s.ctl(t, "remove", running)
	if code != 1 || !strings.Contains(errs, "job-running") {
		t.Fatalf("remove running job: exit %d stderr %q", code, errs)
	}

	if out := s.mustCtl(t, "remove", id); out != id+" removed\n" {
		t.Fatalf("remove printed %q", out)
	}
	code, out, errs = s.ctl(t, "status", id)
	if code != exitNotFound || !strings.Contains(errs, "not-found") {
		t.Fatalf("status of removed job: exit %d stdout %q stderr %q", code, out, errs)
	}
	if !strings.Contains(errs, "hint: list known jobs with: execctl list") {
		t.Errorf("no hint in %q", errs)
	}
}

// TestWaitAndUsage: wait exits with the job's code; status and list show
// resource usage of a running job.
func TestWaitAndUsage(t *testing.T) {
	s := startSupervisor(t)
	id := s.spawnID(t, "--", "sh", "-c", "sleep 0.2; exit 6")
	if code, _, errs := s.ctl(t, "wait", id); code != 6 {
		t.Fatalf("wait exit %d: %s", code, errs)
	}
	run := s.spawnID(t, "--", "sh", "-c", "sleep 30 & wait")
	defer s.ctl(t, "kill", "--signal", "SIGKILL", run)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := s.mustCtl(t, "status", run)
		if strings.Contains(out, "usage:") && strings.Contains(out, "2 processes") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the usage of 2 processes:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond) // the shell starts its child
	}
	if out := s.mustCtl(t, "list"); !strings.Contains(out, "RSS") || !strings.Contains(out, "CPU") {
		t.Fatalf("list has no usage columns:\n%s", out)
	}
	if code, _, _ := s.ctl(t, "wait"); code != exitUsage {
		t.Fatalf("wait without JOB: %d", code)
	}
}

// TestCompletionScripts: the bash script is valid bash and completes
// commands and a command's flags.
func TestCompletionScripts(t *testing.T) {
	code, script, _ := execctl(t, "completion", "bash")
	if code != 0 || !strings.Contains(script, "complete -F _execctl execctl") || !strings.Contains(script, "--follow") {
		t.Fatalf("bash script (exit %d):\n%s", code, script)
	}
	dir := shortTempDir(t)
	f := filepath.Join(dir, "c.bash")
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	check := `source ` + f + `; COMP_WORDS=(execctl sp); COMP_CWORD=1; _execctl; echo "${COMPREPLY[*]}";` +
		` COMP_WORDS=(execctl --json spawn --fo); COMP_CWORD=3; _execctl; echo "${COMPREPLY[*]}"`
	out, err := exec.Command("bash", "-c", check).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "spawn") || !strings.Contains(string(out), "--follow") {
		t.Fatalf("completion: %v\n%s", err, out)
	}
	if code, zsh, _ := execctl(t, "completion", "zsh"); code != 0 || !strings.Contains(zsh, "bashcompinit") {
		t.Fatalf("zsh: %d", code)
	}
	if code, _, _ := execctl(t, "completion", "fish"); code != exitUsage {
		t.Fatalf("fish: %d", code)
	}
}

// TestWaitWithoutEventSocket: spawn --wait and wait go through the wait
// op: they work with no event socket reachable, and --json prints the
// final job.
func TestWaitWithoutEventSocket(t *testing.T) {
	s := startSupervisor(t)
	g := []string{"--control", s.control, "--event", "ipc://" + filepath.Join(s.dir, "nothing-here.sock")}
	if code, _, errs := execctl(t, append(g, "spawn", "--wait", "--shell", "sleep 0.1; exit 3")...); code != 3 {
		t.Fatalf("spawn --wait: exit %d, stderr %q", code, errs)
	}
	id := s.spawnID(t, "--", "sh", "-c", "sleep 0.2; exit 4")
	code, out, errs := execctl(t, append(g, "--json", "wait", id)...)
	if code != 4 {
		t.Fatalf("wait: exit %d, stderr %q", code, errs)
	}
	var st struct {
		Job struct {
			JobID    string `json:"jobId"`
			State    string `json:"state"`
			ExitCode *int   `json:"exitCode"`
		} `json:"job"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Job.JobID != id || st.Job.State != "exited" || st.Job.ExitCode == nil || *st.Job.ExitCode != 4 {
		t.Fatalf("wait --json printed %q (%v)", out, err)
	}
}

// TestOperatorFindings: what an operator's walk through execctl found
// wrong. --json spawn --follow printed each payload as base64 of msgpack
// and exited 137 whatever the job's code; sub-millisecond durations became
// 0 (the default: --timeout 500us meant 10 minutes); a relative --cwd was
// the supervisor's; Ctrl-C on spawn --follow said "context canceled",
// exited 1 and never named the job left running.
func TestOperatorFindings(t *testing.T) {
	s := startSupervisor(t)
	code, out, errs := s.ctl(t, "--json", "spawn", "--follow", "--", "sh", "-c", "echo x; exit 2")
	if code != 2 {
		t.Fatalf("--json spawn --follow: exit %d, want 2\n%s\n%s", code, out, errs)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct {
			Kind    string         `json:"kind"`
			Seq     uint64         `json:"seq"`
			Payload map[string]any `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		kinds = append(kinds, ev.Kind)
		if ev.Kind == "job.stdout" && (ev.Payload["data"] != "eAo=" || ev.Payload["offset"] != float64(0)) {
			t.Fatalf("stdout payload %v: want its fields (data base64 of \"x\\n\")", ev.Payload)
		}
		if ev.Kind == "job.exited" && ev.Payload["exitCode"] != float64(2) {
			t.Fatalf("exit payload %v", ev.Payload)
		}
	}
	if strings.Join(kinds, " ") != "job.started job.stdout job.exited" {
		t.Fatalf("events %v", kinds)
	}

	for _, flag := range []string{"--timeout", "--no-output-timeout", "--grace"} {
		if code, _, errs := s.ctl(t, "spawn", flag, "500us", "--", "true"); code != 2 || !strings.Contains(errs, flag) {
			t.Fatalf("%s 500us: exit %d, %s", flag, code, errs)
		}
	}

	wd, _ := os.Getwd()
	if code, out, errs := s.ctl(t, "spawn", "--follow", "--cwd", ".", "--", "pwd"); code != 0 || strings.TrimSpace(out) != wd {
		t.Fatalf("--cwd .: exit %d, printed %q (want %q)\n%s", code, out, wd, errs)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr proctest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append(s.globals(), "spawn", "--follow", "--", "sh", "-c", "echo up; exec sleep 300"), &stdout, &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stdout.String(), "up") {
		if time.Now().After(deadline) {
			t.Fatalf("no output: %q", stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the follower's output
	}
	cancel() // as Ctrl-C does
	code = <-done
	if code != 130 || !strings.Contains(stderr.String(), "keeps running") || !strings.Contains(stderr.String(), "execctl kill j-") {
		t.Fatalf("interrupted: exit %d, stderr %q", code, stderr.String())
	}
	// spawn --wait: interrupted while it waits (its held wait is cancelled).
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	var stderr2 proctest.Buffer
	running := func() int {
		_, out, _ := s.ctl(t, "--json", "list", "--state", "running")
		return strings.Count(out, `"jobId"`)
	}
	before := running() // (the job interrupted above runs on)
	go func() {
		done <- run(ctx, append(s.globals(), "spawn", "--wait", "--", "sleep", "300"), &stdout, &stderr2)
	}()
	go func() { // Ctrl-C once the new job runs (spawn --wait is waiting then)
		for ctx.Err() == nil {
			if running() > before {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond) // polling for the job
		}
	}()
	if code := <-done; code != 130 || !strings.Contains(stderr2.String(), "execctl kill j-") {
		t.Fatalf("interrupted spawn --wait: exit %d, stderr %q", code, stderr2.String())
	}
}

// TestTokenHints: against a tcp supervisor (which requires ZMTP PLAIN),
// execctl without a token, or with a wrong one, says to pass the token
// (without one it said "is the supervisor running? start one").
func TestTokenHints(t *testing.T) {
	// (the token from everyone: execctl runs as the supervisor's uid on
	// loopback, which --tcp-loopback-uid admits without one)
	s := startSupervisorWith(t, func(c *server.Config) { c.Control = "tcp://127.0.0.1:0"; c.TCPLoopbackUID = false })
	t.Setenv("HOME", s.dir) // (no default token file to find)
	t.Setenv("XDG_STATE_HOME", filepath.Join(s.dir, "none"))
	t.Setenv("EXEC_SUPERVISOR_TOKEN", "")
	ctl := "tcp://" + s.srv.Addr().String()
	if code, _, errs := execctl(t, "--control", ctl, "health"); code != 3 || !strings.Contains(errs, "requires a token") || !strings.Contains(errs, "--token-file") {
		t.Fatalf("no token: exit %d, %q", code, errs)
	}
	t.Setenv("EXEC_SUPERVISOR_TOKEN", "wrong")
	if code, _, errs := execctl(t, "--control", ctl, "health"); code != 3 || !strings.Contains(errs, "refused our token") {
		t.Fatalf("wrong token: exit %d, %q", code, errs)
	}
}

// TestDefaultTokenToSupervisorWithoutAuth: a token execctl finds by itself
// (the default token file) is offered only to a supervisor that asks for
// one, so one running without authentication is reached (it said "server
// wants mechanism NULL, not PLAIN"); a token given explicitly to such a
// supervisor is a mismatch with its own message and hint.
func TestDefaultTokenToSupervisorWithoutAuth(t *testing.T) {
	s := startSupervisorWith(t, func(c *server.Config) { c.Control, c.InsecureTCP = "tcp://127.0.0.1:0", true })
	state := filepath.Join(s.dir, "xdg-state")
	if err := os.MkdirAll(filepath.Join(state, "exec-supervisor"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "exec-supervisor", "token"), []byte("found-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv("EXEC_SUPERVISOR_TOKEN", "")
	ctl := "tcp://" + s.srv.Addr().String()
	if code, out, errs := execctl(t, "--control", ctl, "health"); code != 0 {
		t.Fatalf("default token present: exit %d, %q %q", code, out, errs)
	}
	t.Setenv("EXEC_SUPERVISOR_TOKEN", "given-token")
	if code, _, errs := execctl(t, "--control", ctl, "health"); code != 3 || !strings.Contains(errs, "runs without authentication") {
		t.Fatalf("explicit token: exit %d, %q", code, errs)
	}
}

// TestMoreUsageErrors: an empty JOB, --rows without --pty and a
// non-positive --request-timeout are usage errors (they were exit 1,
// ignored, and accepted).
func TestMoreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"status", ""}, {"spawn", "--rows", "40", "--", "true"}, {"--request-timeout", "-1s", "health"},
		{"resize", "j-1", "40abc", "100"}, {"resize", "j-1", "40", "0x20"}, {"resize", "j-1", "40", "1e2"}, // (resize: fmt.Sscan took these)
		{"--control", "bogus", "health"}, {"--event", "ipc:/", "health"}, {"spawn", "--wait", "--follow", "--", "true"},
		{"poll", "--cursor", "-5", "j-1"}, {"list", "--state", "bogus"}, {"spawn", "--no-pace", "--", "true"}, {"logs", "--pace", "j-1"}} {
		if code, _, errs := execctl(t, args...); code != 2 {
			t.Errorf("%q: exit %d, %s", args, code, errs)
		}
	}
}

// TestListPagesThrough: a listing larger than one list-jobs reply (the
// supervisor pages it) is shown in full by list, list --json (wire field
// names, no paging fields) and status; list --brief leaves the commands
// out.
func TestListPagesThrough(t *testing.T) {
	s := startSupervisorWith(t, func(c *server.Config) { c.ListPageBytes = 32 << 10 })
	const n = 7
	var ids []string
	for range n {
		ids = append(ids, s.spawnID(t, "--", "true", strings.Repeat("z", 12<<10)))
	}
	for _, id := range ids {
		s.mustCtl(t, "wait", id)
	}
	for _, args := range [][]string{{"list"}, {"status"}, {"list", "--state", "exited"}} {
		out := s.mustCtl(t, args...)
		for _, id := range ids {
			if !strings.Contains(out, id+" ") {
				t.Fatalf("%v does not show %s:\n%s", args, id, out)
			}
		}
		if !strings.Contains(out, "true zzz") {
			t.Fatalf("%v shows no command:\n%s", args, out)
		}
	}
	list := jsonObject(t, s.mustCtl(t, "--json", "list"))
	jobs, _ := list["jobs"].([]any)
	if len(jobs) != n || len(list) != 1 {
		t.Fatalf("--json list: %d jobs, keys %v", len(jobs), list)
	}
	for i, j := range jobs {
		m, _ := j.(map[string]any)
		argv, _ := m["argv"].([]any)
		if m["jobId"] != ids[i] || m["state"] != "exited" || len(argv) != 2 {
			t.Fatalf("--json list job %d: %v", i, m)
		}
	}
	out := s.mustCtl(t, "list", "--brief")
	for _, id := range ids {
		if !strings.Contains(out, id+" ") {
			t.Fatalf("list --brief does not show %s:\n%s", id, out)
		}
	}
	if strings.Contains(out, "zzz") {
		t.Fatalf("list --brief shows commands:\n%s", out)
	}
	list = jsonObject(t, s.mustCtl(t, "--json", "list", "--brief"))
	if jobs, _ := list["jobs"].([]any); len(jobs) != n || jobs[0].(map[string]any)["argv"] != nil {
		t.Fatalf("--json list --brief: %v", list)
	}
}

// TestConnectionLimitHint: against a supervisor at its connection limit
// with nothing idle to give up, execctl says so (it said "is the supervisor
// running?").
func TestConnectionLimitHint(t *testing.T) {
	s := startSupervisorWith(t, func(c *server.Config) {
		c.MaxConns = 2
		c.IdleEvictAfter = -1 // (never: every connection counts as busy)
	})
	for i := 0; i < 2+zmtp.DefaultOwnReserve; i++ { // (the limit, and the slots kept for our uid)
		c, err := zmtp.DialClient(context.Background(), "DEALER", s.control, time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	code, _, errs := execctl(t, "--control", s.control, "health")
	if code != 3 || !strings.Contains(errs, "too many connections") || !strings.Contains(errs, "at its connection limit") || strings.Contains(errs, "is the supervisor running") {
		t.Fatalf("exit %d, %q", code, errs)
	}
}

// TestJSONSendKeysAndResize: --json send-keys and resize print the ops'
// results with their wire field names (they printed nothing).
func TestJSONSendKeysAndResize(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--pty", "--", "sh", "-c", "exec sleep 30")
	defer s.ctl(t, "kill", "--signal", "SIGKILL", id)
	w := jsonObject(t, s.mustCtl(t, "--json", "send-keys", id, "Enter", "C-a"))
	if w["written"] != float64(2) {
		t.Fatalf("--json send-keys: %v", w)
	}
	if job, _ := w["job"].(map[string]any); job == nil || job["jobId"] != id {
		t.Fatalf("--json send-keys: no job: %v", w)
	}
	r := jsonObject(t, s.mustCtl(t, "--json", "resize", id, "40", "120"))
	job, _ := r["job"].(map[string]any)
	if job == nil || job["jobId"] != id || job["rows"] != float64(40) || job["cols"] != float64(120) {
		t.Fatalf("--json resize: %v", r)
	}
	if out := s.mustCtl(t, "resize", id, "41", "121"); out != "" {
		t.Fatalf("resize printed %q", out)
	}
}

// TestWaitStoppedServiceExitCode: a service stopped between runs ended
// with no exit status of its own: wait exits 1, not 137 (nothing was
// killed).
func TestWaitStoppedServiceExitCode(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--restart", "always", "--restart-delay", "1m", "--", "true")
	deadline := time.Now().Add(10 * time.Second)
	for {
		job := jsonObject(t, s.mustCtl(t, "--json", "status", id))["job"].(map[string]any)
		if job["state"] == "restarting" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never waiting to restart: %v", job)
		}
		time.Sleep(20 * time.Millisecond) // polling the job's state
	}
	s.mustCtl(t, "stop", id)
	if code, _, errs := s.ctl(t, "wait", id); code != 1 || !strings.Contains(errs, "stopped") {
		t.Fatalf("wait: exit %d, %q; want 1, stopped", code, errs)
	}
}

// TestJobIDPrefixes: commands take an unambiguous prefix of a job id (with
// or without its "j-", in any case, at least minPrefix digits), as list
// shows them; one too short is a usage error, an unknown one is not-found
// (ambiguity: TestMatchJob).
func TestJobIDPrefixes(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	a := s.spawnID(t, "--shell", "echo from-a")
	b := s.spawnID(t, "--shell", "echo from-b")
	s.waitExited(t, a)
	s.waitExited(t, b)
	// The shortest prefixes that tell them apart (and are long enough).
	n := 2 + minPrefix - 1
	for a[:n] == b[:n] {
		n++
	}
	if got := jobOf(t, jsonObject(t, s.mustCtl(t, "--json", "status", a[:n+1])))["jobId"]; got != a {
		t.Fatalf("status %s: job %v, want %s", a[:n+1], got, a)
	}
	if out := s.mustCtl(t, "poll", strings.ToUpper(strings.TrimPrefix(b[:n+1], "j-"))); out != "from-b\n" {
		t.Fatalf("poll by a prefix without j-: %q", out)
	}
	if out := s.mustCtl(t, "wait", a[:n+1], b[:n+1]); out != "" {
		t.Logf("wait printed %q", out)
	}
	code, _, errs := s.ctl(t, "kill", "j-"+a[2:4])
	if code != exitUsage || !strings.Contains(errs, "at least 4 characters") {
		t.Fatalf("too short a prefix: exit %d stderr %q", code, errs)
	}
	code, _, errs = s.ctl(t, "status", "j-zzzz")
	if code != exitNotFound || !strings.Contains(errs, "not-found") {
		t.Fatalf("unknown prefix: exit %d stderr %q", code, errs)
	}
	if out := s.mustCtl(t, "remove", a[:n+1]); out != a+" removed\n" {
		t.Fatalf("remove by prefix printed %q", out)
	}
}

// TestMatchJob: a prefix matching several jobs is a usage error naming
// them; an exact id wins over prefixes of others.
func TestMatchJob(t *testing.T) {
	jobs := []protocol.JobInfo{{JobID: "j-abcd000000000001"}, {JobID: "j-abcd000000000002"}, {JobID: "j-abce000000000003"}}
	_, err := matchJob("abcd", jobs)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(ue.msg, "ambiguous") || !strings.Contains(ue.msg, "j-abcd000000000001") || !strings.Contains(ue.msg, "j-abcd000000000002") {
		t.Fatalf("ambiguous: %v", err)
	}
	if id, err := matchJob("ABCE", jobs); err != nil || id != "j-abce000000000003" {
		t.Fatalf("unique: %q %v", id, err)
	}
	if id, err := matchJob("j-zzzz", jobs); err != nil || id != "j-zzzz" {
		t.Fatalf("unknown: %q %v (want it passed on, for not-found)", id, err)
	}
}

// TestLastOutputAcrossSkippedOffsets: attach's recent output (lastOutput)
// is the last bytes printed even when a service resumed after its
// supervisor crashed skipped offsets between its runs' output (it showed
// the new run's bytes only).
func TestLastOutputAcrossSkippedOffsets(t *testing.T) {
	state := filepath.Join(shortTempDir(t), "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	doc := &journal.File{Version: journal.Version, InstanceID: "dead", Jobs: []journal.Record{{
		JobID: "j-0123456789abcdef", Shell: "echo new", State: "running", Pid: 4194300, Pgid: 4194300,
		CreatedAt: now - 1000, StartedAt: now - 1000, UpdatedAt: now - 500, LastOutputAt: now - 500,
		InstanceID: "dead", StdoutBytes: 4, OutputEnd: 4, LastSeq: 2,
		OutputTail: []byte("old\n"), OutputTailSeq: 2,
		Service: &journal.Service{Spec: protocol.SpawnArgs{Shell: "echo new", Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}}, Attempt: 1},
	}}}
	if err := journal.New(filepath.Join(state, "journal.json")).Save(doc); err != nil {
		t.Fatal(err)
	}
	s := startSupervisorWith(t, func(c *server.Config) { c.StateDir = state })
	c := s.client(t)
	var info protocol.JobInfo
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		info, err = c.Status(context.Background(), "j-0123456789abcdef")
		if err != nil {
			t.Fatal(err)
		}
		if info.Attempt == 2 && info.State == protocol.StateExited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed run did not end: %+v", info)
		}
		time.Sleep(20 * time.Millisecond) // polling the job's state
	}
	if info.OutputEnd < 1<<30 {
		t.Fatalf("no offsets were skipped (output end %d): the test needs them", info.OutputEnd)
	}
	g := &globals{client: c}
	got, _, err := lastOutput(context.Background(), g, info, 100)
	if err != nil || string(got) != "old\nnew\n" {
		t.Fatalf("last output %q (%v), want both runs' output", got, err)
	}
}

// TestLogsReportsLostOutput: a follow that could not show all of the
// output (evicted from the ring before it was read) says how much was
// lost and exits 5 though the job exited 0; logs takes each job once,
// refuses an unknown one before showing any, and --json chunks name
// their job.
func TestLogsReportsLostOutput(t *testing.T) {
	t.Parallel()
	s := startSupervisorWith(t, func(c *server.Config) {
		c.Jobs.RingBytes = 64 << 10
		c.Jobs.MergeMaxBytes = 8 << 10
	})
	id := s.spawnID(t, "--shell", "head -c 1000000 /dev/zero | tr '\\0' x; echo; echo last")
	s.waitExited(t, id)
	code, out, errs := s.ctl(t, "logs", "-f", id)
	if code != 5 || !strings.Contains(errs, "output lost") || !strings.Contains(errs, "exit code 5") || !strings.HasSuffix(out, id+" | last\n"+id+" | [ended: exit code 0]\n") {
		t.Fatalf("logs -f of a job whose output was evicted: exit %d (want 5)\nstderr: %s\nstdout ends: %q", code, errs, out[max(0, len(out)-200):])
	}
	// (--json: the gap is an event on stdout, exit 5 an error object)
	code, _, errs = s.ctl(t, "logs", "-f", id, "--json")
	if e := jsonError(t, errs); code != 5 || e["code"] != "output-lost" || e["exitCode"] != float64(5) {
		t.Fatalf("logs -f --json of a job whose output was evicted: exit %d, stderr %s", code, errs)
	}

	small := s.spawnID(t, "--shell", "echo one")
	s.waitExited(t, small)
	code, out, errs = s.ctl(t, "logs", "-f", small, small)
	if code != 0 || strings.Count(out, "one") != 1 {
		t.Fatalf("logs -f of one job given twice: exit %d, stdout %q, stderr %s", code, out, errs)
	}
	code, out, errs = s.ctl(t, "logs", "-f", small, "j-0000000000000000")
	if code != 4 || out != "" {
		t.Fatalf("logs -f with an unknown job: exit %d (want 4), stdout %q, stderr %s", code, out, errs)
	}
	out = s.mustCtl(t, "--json", "logs", small)
	if m := jsonObject(t, out); m["jobId"] != small || m["data"] != "b25lCg==" {
		t.Fatalf("logs --json chunk: %s", out)
	}
}

// TestHealthSaysWithoutCgroups: human health says when jobs get no
// cgroup of their own, and why.
func TestHealthSaysWithoutCgroups(t *testing.T) {
	t.Parallel()
	s := startSupervisorWith(t, func(c *server.Config) { c.NoCgroups = true })
	if out := s.mustCtl(t, "health"); !strings.Contains(out, "no cgroup per job (disabled with --no-cgroups)") {
		t.Fatalf("health without cgroups: %q", out)
	}
}

// TestVersionAndCommandHelp: execctl --version names the version and
// protocol; a command without arguments shows its name in its usage.
func TestVersionAndCommandHelp(t *testing.T) {
	if code, out, _ := execctl(t, "--version"); code != 0 || !strings.HasPrefix(out, "execctl ") || !strings.Contains(out, "protocol 2") {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
	if code, _, errs := execctl(t, "health", "--help"); code != 0 || !strings.Contains(errs, "usage: execctl [global flags] health\n") {
		t.Fatalf("health --help: exit %d, %q", code, errs)
	}
}

// TestSilentSupervisorHint: a socket that accepts but never answers (a
// stopped or hung supervisor) is reported as not answering, not as
// missing: the hint must not say to start another one.
func TestSilentSupervisorHint(t *testing.T) {
	t.Parallel()
	dir := shortTempDir(t)
	path := filepath.Join(dir, "silent.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, errs := execctl(t, "--control", "ipc://"+path, "health")
	if code != 3 || !strings.Contains(errs, "did not answer in time") || strings.Contains(errs, "start one with") {
		t.Fatalf("silent supervisor: exit %d, stderr:\n%s", code, errs)
	}
}

// slowWriter is a terminal that takes its time.
type slowWriter struct{ proctest.Buffer }

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond) // (a slow reader, not a wait for anything)
	return w.Buffer.Write(p)
}

// TestSpawnFollowPaced: spawn --follow holds the job to execctl's pace,
// so a job printing far more than the ring buffer and event queue hold,
// faster than execctl shows it, loses nothing; --no-pace loses output
// (exit 5), which is what makes the first half mean something.
func TestSpawnFollowPaced(t *testing.T) {
	t.Parallel()
	s := startSupervisorWith(t, func(c *server.Config) {
		c.Jobs.RingBytes = 256 << 10
		c.Jobs.MergeMaxBytes = 16 << 10
		c.SubscriberQueueBytes = 64 << 10
	})
	want, err := exec.Command("seq", "1", "3000000").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, noPace := range []bool{false, true} {
		args := append(s.globals(), "spawn", "--follow")
		if noPace {
			args = append(args, "--no-pace")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var out slowWriter
		var errb proctest.Buffer
		code := run(ctx, append(args, "--", "seq", "1", "3000000"), &out, &errb)
		cancel()
		got := out.String()
		switch {
		case !noPace && (code != 0 || got != string(want)):
			t.Fatalf("spawn --follow: exit %d, %d of %d bytes\n%s", code, len(got), len(want), errb.String())
		case noPace && (code != 5 || len(got) >= len(want)):
			t.Fatalf("spawn --follow --no-pace: exit %d, %d of %d bytes: nothing lost, so the paced half shows nothing\n%s", code, len(got), len(want), errb.String())
		}
	}
}

// TestTopNotOnATerminal: top writing to a pipe or file prints one plain
// snapshot (no screen control) and exits.
func TestTopNotOnATerminal(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--", "sleep", "30")
	defer s.ctl(t, "kill", "--signal", "KILL", id)
	code, out, errs := s.ctl(t, "top")
	if code != 0 || strings.Contains(out, "\x1b") || strings.Contains(out, "\r") || !strings.Contains(out, id) {
		t.Fatalf("top to a buffer: exit %d, %q\n%s", code, out, errs)
	}
}

// TestWriteWithoutStdinHint: writing to a job spawned without --stdin
// says which execctl flag gives it one (the supervisor's message names
// the wire field).
func TestWriteWithoutStdinHint(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--", "sleep", "30")
	defer s.ctl(t, "kill", "--signal", "KILL", id)
	if code, _, errs := s.ctl(t, "write", id, "hello"); code != 1 || !strings.Contains(errs, "--stdin") {
		t.Fatalf("write without stdin: exit %d\n%s", code, errs)
	}
}

// TestAccessHints: a socket that is there but not open to this user, and
// a socket directory another user controls, get hints of their own, not
// "is the supervisor running? start one with" (which cannot help: found
// by an operator audit).
func TestAccessHints(t *testing.T) {
	t.Parallel()
	var out, errs bytes.Buffer
	g := &globals{stdout: &out, stderr: &errs, client: client.New(client.Options{ControlAddress: "ipc:///x/c.sock", EventAddress: "ipc:///x/e.sock"})}
	defer g.client.Close()
	denied := &client.ConnectError{Address: "ipc:///x/c.sock", Err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}}
	if code := report(g, "health", denied); code != 3 || !strings.Contains(errs.String(), "--allow-uid") || strings.Contains(errs.String(), "start one with") {
		t.Fatalf("permission denied: exit %d, stderr:\n%s", code, errs.String())
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	// (in a directory anyone may write to, as /tmp: anyone could have
	// made it)
	shared := filepath.Join(shortTempDir(t), "shared")
	if err := os.Mkdir(shared, 0o755); err != nil || os.Chmod(shared, 0o1777) != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(shared, "theirs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := execctl(t, "--control", "ipc://"+dir+"/c.sock", "--event", "ipc://"+dir+"/e.sock", "health")
	if code != 3 || !strings.Contains(stderr, "another user controls") || strings.Contains(stderr, "start one with") {
		t.Fatalf("directory of another user: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestWriteEnterToPTY: write appends Enter (\r, what a terminal sends)
// for a PTY job, and a newline for a pipe job (it appended \n to both:
// a program reading its terminal raw got Ctrl-J, not Enter; found by a
// PTY audit).
func TestWriteEnterToPTY(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--pty", "--", "sh", "-c", "stty raw -echo; echo ready; dd bs=1 count=3 2>/dev/null | od -An -c")
	defer s.ctl(t, "kill", "--signal", "SIGKILL", id)
	s.waitStatus(t, id, "ready", func(job map[string]any) bool { n, _ := job["outputEnd"].(float64); return n > 0 })
	s.mustCtl(t, "write", id, "ab")
	if code, _, errs := s.ctl(t, "wait", id); code != 0 {
		t.Fatalf("wait: %d %s", code, errs)
	}
	if out := s.mustCtl(t, "poll", id); !strings.Contains(out, `a   b  \r`) {
		t.Fatalf("the job read %q, want a b \\r", out)
	}
}

// TestStatusAndListShowTerminalAndOneLine: status shows a PTY job's
// terminal, and list keeps a multi-line command on its row (its newlines
// broke the table; status left the terminal out: found by a PTY audit).
func TestStatusAndListShowTerminalAndOneLine(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--pty", "--rows", "30", "--cols", "100", "--shell", "sleep 30\necho two")
	defer s.ctl(t, "kill", "--signal", "SIGKILL", id)
	if out := s.mustCtl(t, "status", id); !strings.Contains(out, "pty 30x100") {
		t.Fatalf("status: %q; want the terminal", out)
	}
	out := s.mustCtl(t, "list")
	var row string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, id) {
			row = l
		}
	}
	if !strings.Contains(row, `sleep 30\necho two`) {
		t.Fatalf("list: the job's row %q (all: %q); want its command on it, escaped", row, out)
	}
}

// TestHintsByDetail: the hints for a write to a job without stdin and for
// a terminal size out of range come from the error's details, not from
// its message text.
func TestHintsByDetail(t *testing.T) {
	s := startSupervisor(t)
	id := s.spawnID(t, "--", "sleep", "30")
	defer s.ctl(t, "kill", "--signal", "SIGKILL", id)
	code, _, errs := execctl(t, append(s.globals(), "write", id, "hello")...)
	if code != 1 || !strings.Contains(errs, "spawn the job with --stdin") {
		t.Fatalf("write without stdin: exit %d, %q", code, errs)
	}
	if h := hintFor("spawn", &protocol.Error{Code: protocol.CodeInvalidArgument, Message: "anything", Details: map[string]string{"field": "pty"}}); !strings.Contains(h, "--rows and --cols") {
		t.Fatalf("pty hint: %q", h)
	}
}

// TestSpawnQueue: at the job limit, spawn --queue answers a queued job
// that list --state queued and health show and that runs once a slot
// frees (spawn --queue --wait exits with its code); spawn without it is
// refused with a hint naming --queue.
func TestSpawnQueue(t *testing.T) {
	t.Parallel()
	s := startSupervisorWith(t, func(c *server.Config) { c.Jobs.MaxJobs = 1 })
	busy := jsonObject(t, s.mustCtl(t, "--json", "spawn", "--", "sleep", "60"))["jobId"].(string)
	q := jsonObject(t, s.mustCtl(t, "--json", "spawn", "--queue", "--shell", "exit 3"))
	id, _ := q["jobId"].(string)
	if st := jobOf(t, q)["state"]; st != "queued" {
		t.Fatalf("spawn --queue at the limit: state %v", st)
	}
	if out := s.mustCtl(t, "list", "--state", "queued"); !strings.Contains(out, id) || !strings.Contains(out, "queued") {
		t.Fatalf("list --state queued:\n%s", out)
	}
	if out := s.mustCtl(t, "health"); !strings.Contains(out, "1 jobs queued") {
		t.Fatalf("health: %s", out)
	}
	code, _, errs := s.ctl(t, "spawn", "--", "true")
	if code == 0 || !strings.Contains(errs, "spawn --queue") {
		t.Fatalf("spawn at the limit without --queue: exit %d, %q", code, errs)
	}
	s.mustCtl(t, "kill", "--signal", "SIGKILL", busy)
	if code, _, errs := s.ctl(t, "wait", id); code != 3 {
		t.Fatalf("wait for the queued job: exit %d (%s), want its exit code 3", code, errs)
	}
}

// TestLogsFromDisk: a job spawned with --output disk is printed by logs
// (and poll) after the supervisor forgot it, from its files, by its id or
// its name (the job of that name that ended last); remove deletes them;
// --output takes disk or memory only.
func TestLogsFromDisk(t *testing.T) {
	t.Parallel()
	s := startSupervisorWith(t, func(c *server.Config) {
		c.Jobs.MaxFinished = 1
		c.Jobs.RingBytes = 16 << 10
		c.Jobs.MergeMaxBytes = 4 << 10
	})
	id := jsonObject(t, s.mustCtl(t, "--json", "spawn", "--wait", "--output", "disk", "--name", "seqs", "--shell", "seq 1 20000; echo done >&2"))["jobId"].(string)
	s.mustCtl(t, "spawn", "--wait", "--", "true") // (the first is forgotten: one finished job is kept)
	if code, _, _ := s.ctl(t, "status", id); code == 0 {
		t.Fatalf("status of a forgotten job succeeded")
	}
	for _, ref := range []string{id, "seqs"} {
		out := s.mustCtl(t, "logs", ref)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 20001 || lines[0] != id+" | 1" || lines[19999] != id+" | 20000" || lines[20000] != id+" | done" {
			t.Fatalf("logs %s of a forgotten job: %d lines, first %q, last %q", ref, len(lines), lines[0], lines[len(lines)-1])
		}
		// Followed: replayed from the files to its end, nothing said
		// lost (the events other than output are not in the files).
		code, out, errs := s.ctl(t, "logs", "-f", ref)
		lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != 0 || errs != "" || len(lines) != 20002 || lines[0] != id+" | 1" || lines[20000] != id+" | done" || lines[20001] != id+" | [ended: exit code 0]" {
			t.Fatalf("logs -f %s of a forgotten job: exit %d, stderr %q, %d lines, last %q", ref, code, errs, len(lines), lines[len(lines)-1])
		}
	}
	// A later job of that name, forgotten too, is the one the name finds.
	id2 := jsonObject(t, s.mustCtl(t, "--json", "spawn", "--wait", "--output", "disk", "--name", "seqs", "--", "echo", "second"))["jobId"].(string)
	s.mustCtl(t, "spawn", "--wait", "--", "true")
	if out := s.mustCtl(t, "logs", "seqs"); out != id2+" | second\n" {
		t.Fatalf("logs seqs after a second job of that name: %q", out)
	}
	if out := s.mustCtl(t, "poll", "seqs"); out != "second\n" {
		t.Fatalf("poll seqs: %q", out)
	}
	if code, _, _ := s.ctl(t, "logs", "nosuchname"); code == 0 {
		t.Fatalf("logs of a name no job has succeeded")
	}
	// remove of the name two forgotten jobs have: refused, with their ids.
	if code, _, errs := s.ctl(t, "remove", "seqs"); code != 1 || !strings.Contains(errs, id2+" "+id) || !strings.Contains(errs, "remove one by its id") {
		t.Fatalf("remove seqs (two forgotten jobs of that name): exit %d, %q", code, errs)
	}
	s.mustCtl(t, "remove", id)
	if code, _, _ := s.ctl(t, "logs", id); code == 0 {
		t.Fatalf("logs of a removed job succeeded")
	}
	// Now one has it: removed by its name.
	if out := s.mustCtl(t, "remove", "seqs"); out != id2+" removed\n" {
		t.Fatalf("remove seqs (one forgotten job of that name): %q", out)
	}
	if code, _, _ := s.ctl(t, "logs", "seqs"); code == 0 {
		t.Fatalf("logs of a removed name succeeded")
	}
	if code, _, errs := s.ctl(t, "spawn", "--output", "tape", "--", "true"); code != 2 || !strings.Contains(errs, "--output") {
		t.Fatalf("spawn --output tape: exit %d, %q", code, errs)
	}
}
