package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
)

// TestJobNames: a job spawned with --name build is found by that name in
// every command that takes a JOB (logs -f included: it follows the job's
// id); a second live job cannot take the name; list filters by name and
// labels and shows a NAME column; the name survives a supervisor restart
// and is free again once its job has finished.
func TestJobNames(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	gate := filepath.Join(s.dir, "go")
	id := s.spawnID(t, "--name", "build", "--label", "team=infra", "--label", "env=prod", "--stdin",
		"--shell", fmt.Sprintf("echo ready; read line; echo \"got $line\"; while [ ! -e %s ]; do sleep 0.02; done; echo done", gate))
	other := s.spawnID(t, "--label", "team=web", "--", "true")
	s.waitExited(t, other)

	code, _, errs := s.ctl(t, "spawn", "--name", "build", "--", "true")
	if code != exitFailed || !strings.Contains(errs, "name-taken") || !strings.Contains(errs, id) {
		t.Fatalf("second spawn --name build: exit %d, stderr %q; want name-taken naming %s", code, errs, id)
	}
	for _, bad := range []string{"j-1234", "J-x", "a b", "-x", strings.Repeat("n", 65), "caf\u00e9", "a\xffb", "*"} {
		if code, _, errs := s.ctl(t, "spawn", "--name", bad, "--", "true"); code != exitUsage || !strings.Contains(errs, "--name") {
			t.Errorf("spawn --name %q: exit %d, stderr %q; want a usage error", bad, code, errs)
		}
	}

	if job := s.jsonStatus(t, "build"); job["jobId"] != id || job["name"] != "build" {
		t.Fatalf("status build: %v", job)
	}
	if out := s.mustCtl(t, "status", "build"); !strings.Contains(out, "name:") || !strings.Contains(out, "build") {
		t.Fatalf("status build shows no name:\n%s", out)
	}
	s.mustCtl(t, "write", "build", "hello")
	done := bgCtl(t, append(s.globals(), "logs", "-f", "build")...)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.mustCtl(t, "poll", "build"), "got hello") {
		if time.Now().After(deadline) {
			t.Fatal("poll build never showed the line written to it")
		}
		time.Sleep(20 * time.Millisecond) // polling a CLI: there is nothing to block on
	}

	list := s.mustCtl(t, "list", "--label", "team=infra", "--label", "env=prod")
	if !strings.HasPrefix(list, "JOB") || !strings.Contains(strings.SplitN(list, "\n", 2)[0], "NAME") ||
		!strings.Contains(list, id) || !strings.Contains(list, " build ") || strings.Contains(list, other) {
		t.Fatalf("list --label team=infra --label env=prod:\n%s", list)
	}
	if list := s.mustCtl(t, "list", "--label", "team=infra", "--label", "env=dev"); strings.Contains(list, id) {
		t.Fatalf("list --label env=dev shows %s:\n%s", id, list)
	}
	if list := s.mustCtl(t, "list", "--name", "bu*"); !strings.Contains(list, id) || strings.Contains(list, other) {
		t.Fatalf("list --name 'bu*':\n%s", list)
	}
	jobs, _ := jsonObject(t, s.mustCtl(t, "--json", "list", "--name", "build"))["jobs"].([]any)
	if len(jobs) != 1 || jobs[0].(map[string]any)["name"] != "build" {
		t.Fatalf("--json list --name build: %v", jobs)
	}
	if code, _, errs := s.ctl(t, "list", "--name", "["); code != exitUsage {
		t.Fatalf("list --name '[': exit %d, stderr %q", code, errs)
	}
	if code, _, errs := s.ctl(t, "list", "--label", "team"); code != exitUsage {
		t.Fatalf("list --label team: exit %d, stderr %q", code, errs)
	}

	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != 0 {
		t.Fatalf("logs -f build: exit %d\nstdout: %s\nstderr: %s", r.code, r.out, r.errs)
	}
	if got := prefixedLines(t, r.out, id)[id]; fmt.Sprint(got) != fmt.Sprint([]string{"ready", "got hello", "done", "[ended: exit code 0]"}) {
		t.Fatalf("logs -f build: %q\n%s", got, r.out)
	}
	if code, _, errs := s.ctl(t, "wait", "build"); code != 0 {
		t.Fatalf("wait build: exit %d, %s", code, errs)
	}
	s.mustCtl(t, "history", "build")
	if out := s.mustCtl(t, "kill", "build"); !strings.Contains(out, id) {
		t.Fatalf("kill build (finished): %q", out)
	}

	// Finished: the name is free; it names the new job, then (the new one
	// removed) the old one again.
	again := s.spawnID(t, "--name", "build", "--", "sleep", "300")
	if job := s.jsonStatus(t, "build"); job["jobId"] != again {
		t.Fatalf("status build: %v, want the live %s", job["jobId"], again)
	}
	s.mustCtl(t, "kill", "--signal", "SIGKILL", "build")
	s.waitExited(t, again)
	if out := s.mustCtl(t, "remove", "build"); out != again+" removed\n" {
		t.Fatalf("remove build: %q, want %s removed", out, again)
	}
	if job := s.jsonStatus(t, "build"); job["jobId"] != id {
		t.Fatalf("status build: %v, want %s", job["jobId"], id)
	}

	// A service keeps its name across runs and across a supervisor restart.
	svc := s.spawnID(t, "--name", "web", "--restart", "always", "--", "sleep", "300")
	if out := s.mustCtl(t, "restart", "web"); !strings.Contains(out, svc) {
		t.Fatalf("restart web: %q", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := startSupervisorWith(t, func(c *server.Config) { c.StateDir = filepath.Join(s.dir, "state") })
	if job := s2.jsonStatus(t, "build"); job["jobId"] != id || job["name"] != "build" {
		t.Fatalf("status build after a supervisor restart: %v", job)
	}
	deadline = time.Now().Add(10 * time.Second)
	for job := s2.jsonStatus(t, "web"); job["jobId"] != svc || job["state"] != "running"; job = s2.jsonStatus(t, "web") {
		if time.Now().After(deadline) {
			t.Fatalf("service web not resumed after the restart: %v", job)
		}
		time.Sleep(20 * time.Millisecond) // polling a CLI: there is nothing to block on
	}
	if out := s2.mustCtl(t, "stop", "web"); !strings.Contains(out, svc) {
		t.Fatalf("stop web: %q", out)
	}
	s2.waitExited(t, "web")
	if out := s2.mustCtl(t, "start", "web"); !strings.Contains(out, svc) {
		t.Fatalf("start web: %q", out)
	}
	s2.mustCtl(t, "kill", "web")
	s2.waitExited(t, svc)
}

// TestJobNamePTY: send-keys and resize take a terminal job's name.
func TestJobNamePTY(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--name", "term", "--pty", "--", "sh")
	s.mustCtl(t, "resize", "term", "30", "100")
	if job := s.jsonStatus(t, id); job["rows"] != float64(30) || job["cols"] != float64(100) {
		t.Fatalf("resize term: %vx%v", job["rows"], job["cols"])
	}
	s.mustCtl(t, "send-keys", "term", "e", "x", "i", "t", "Enter")
	s.waitExited(t, "term")
}

// TestJobNamesAcrossSupervisorCrash: after a SIGKILLed supervisor, the
// next one knows its jobs by their names (journaled, or in the intents of
// spawns not journaled yet): the one-shot job ended (supervisor-restart)
// and let its name go; the resumed service holds its own.
func TestJobNamesAcrossSupervisorCrash(t *testing.T) {
	bin := supervisorBinary(t)
	dir := shortTempDir(t)
	p := startSupProc(t, bin, dir, "--metrics-addr", "")
	g := p.globals()
	ctl := func(args ...string) (int, string, string) { return execctl(t, append(g, args...)...) }
	must := func(args ...string) string {
		t.Helper()
		code, out, errs := ctl(args...)
		if code != 0 {
			t.Fatalf("execctl %q: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
		}
		return strings.TrimSpace(out)
	}
	build := must("spawn", "--name", "build", "--", "sleep", "330")
	web := must("spawn", "--name", "web", "--restart", "always", "--", "sleep", "331")
	defer func() { execctl(t, append(g, "kill", "--signal", "SIGKILL", web)...) }()

	p.kill9()
	startSupProc(t, bin, dir, "--metrics-addr", "")
	job := jobOf(t, jsonObject(t, must("--json", "status", "build")))
	if job["jobId"] != build || job["name"] != "build" || job["reason"] != "supervisor-restart" {
		t.Fatalf("status build after the crash: %v", job)
	}
	again := must("spawn", "--name", "build", "--", "true")
	if job := jobOf(t, jsonObject(t, must("--json", "wait", "build"))); job["jobId"] != again {
		t.Fatalf("wait build: %v, want the new %s", job["jobId"], again)
	}
	deadline := time.Now().Add(10 * time.Second)
	for job = jobOf(t, jsonObject(t, must("--json", "status", "web"))); job["state"] != "running"; job = jobOf(t, jsonObject(t, must("--json", "status", "web"))) {
		if time.Now().After(deadline) {
			t.Fatalf("service web not resumed after the crash: %v", job)
		}
		time.Sleep(20 * time.Millisecond) // polling a CLI: there is nothing to block on
	}
	if job["jobId"] != web || job["name"] != "web" {
		t.Fatalf("status web after the crash: %v", job)
	}
	if code, _, errs := ctl("spawn", "--name", "web", "--", "true"); code != exitFailed || !strings.Contains(errs, "name-taken") {
		t.Fatalf("spawn --name web while the resumed service runs: exit %d, %s", code, errs)
	}
}

// TestHexNameOfForgottenJob: a name made of hex digits is a name first:
// a forgotten job (output on disk) of that name is found by it, even
// when it is shorter than an id prefix may be, or when a job in memory
// has an id that it abbreviates; a prefix is the fallback when no job
// has that id or name, in memory or on disk.
func TestHexNameOfForgottenJob(t *testing.T) {
	t.Parallel()
	s := startSupervisorWith(t, func(c *server.Config) { c.Jobs.MaxFinished = 1 })
	spawnForgotten := func(name, text string) string {
		t.Helper()
		id := jsonObject(t, s.mustCtl(t, "--json", "spawn", "--wait", "--output", "disk", "--name", name, "--", "echo", text))["jobId"].(string)
		s.mustCtl(t, "spawn", "--wait", "--", "true") // (forgets it: one finished job is kept)
		return id
	}
	short := spawnForgotten("abc", "short")
	named := spawnForgotten("beef", "named")
	running := s.spawnID(t, "--id", "j-beef000000000001", "--", "sleep", "300")
	t.Cleanup(func() { s.ctl(t, "kill", running) })

	for _, c := range []struct{ args, want string }{
		{"logs abc", short + " | short\n"},
		{"poll abc", "short\n"},
		{"logs beef", named + " | named\n"},
		{"logs -f beef", named + " | named\n" + named + " | [ended: exit code 0]\n"},
		{"status beef0", "j-beef000000000001"}, // (a prefix: no job has that name)
	} {
		out := s.mustCtl(t, strings.Fields(c.args)...)
		if strings.HasPrefix(c.args, "status") {
			if !strings.Contains(out, c.want) {
				t.Fatalf("%s: %q, want job %s", c.args, out, c.want)
			}
			continue
		}
		if out != c.want {
			t.Fatalf("%s: %q, want %q", c.args, out, c.want)
		}
	}
	if out := s.mustCtl(t, "remove", "beef"); out != named+" removed\n" {
		t.Fatalf("remove beef: %q, want the forgotten job named so removed", out)
	}
	if out := s.mustCtl(t, "status", "beef"); !strings.Contains(out, running) {
		t.Fatalf("status beef once no job has that name: %q, want the job whose id it abbreviates", out)
	}
	if code, _, errs := s.ctl(t, "logs", "abd"); code != exitUsage || !strings.Contains(errs, "at least 4") {
		t.Fatalf("logs abd (no such name, too short a prefix): exit %d, %q", code, errs)
	}
}
