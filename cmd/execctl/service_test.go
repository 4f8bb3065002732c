package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// waitStatus polls `execctl --json status ID` until ok accepts the job,
// for at most 10 s, and returns that "job" object.
func (s *supervisor) waitStatus(t *testing.T, id, what string, ok func(job map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		job := s.jsonStatus(t, id)
		if ok(job) {
			return job
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: not %s after 10s: %v", id, what, job)
		}
		time.Sleep(20 * time.Millisecond) // polling a CLI: there is nothing to block on
	}
}

// runningWith accepts a running job at attempt with at least stdout bytes
// of output (so that the run has printed what the test expects).
func runningWith(attempt int, stdout int) func(map[string]any) bool {
	return func(job map[string]any) bool {
		return job["state"] == "running" && job["attempt"] == float64(attempt) && job["stdoutBytes"].(float64) >= float64(stdout)
	}
}

// historyRuns returns the runs of `execctl --json history ID`, checking
// the reply's shape.
func (s *supervisor) historyRuns(t *testing.T, id string, args ...string) []map[string]any {
	t.Helper()
	h := jsonObject(t, s.mustCtl(t, append(append([]string{"--json", "history"}, args...), id)...))
	if h["jobId"] != id {
		t.Fatalf("history jobId = %v, want %s", h["jobId"], id)
	}
	list, ok := h["runs"].([]any)
	if !ok {
		t.Fatalf("history has no \"runs\" array: %v", h)
	}
	runs := make([]map[string]any, len(list))
	for i, r := range list {
		runs[i], _ = r.(map[string]any)
		if _, ok := runs[i]["tail"].([]any); !ok {
			t.Fatalf("run %d has no \"tail\" array: %v", i, r)
		}
	}
	return runs
}

// TestServiceLifecycle: a failing service is restarted up to its limit,
// its runs are in history with their output, and start, restart and stop
// drive it afterwards.
func TestServiceLifecycle(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	gate := filepath.Join(s.dir, "up")
	// Fails at once ("boom", exit 1) until the gate file exists.
	script := `if [ -e "$GATE" ]; then echo up; exec sleep 30; fi; echo boom; exit 1`
	id := s.spawnID(t, "--restart", "on-failure", "--restart-delay", "50ms", "--max-restarts", "3", "--env", "GATE="+gate, "--", "sh", "-c", script)

	// wait follows the service through its restarts to the end of supervision.
	code, _, errs := s.ctl(t, "wait", id)
	if code != 1 || !strings.Contains(errs, "restart-limit") {
		t.Fatalf("wait: exit %d (want 1, the last run's code), stderr %q (want restart-limit)", code, errs)
	}
	job := s.jsonStatus(t, id)
	if job["state"] != "exited" || job["reason"] != "restart-limit" || job["attempt"] != float64(3) || job["restart"] != "on-failure" {
		t.Fatalf("status after the restart limit: %v", job)
	}

	hist := s.mustCtl(t, "history", id)
	lines := strings.Split(strings.TrimSuffix(hist, "\n"), "\n")
	if len(lines) != 6 {
		t.Fatalf("history: want 3 runs of 2 lines each:\n%s", hist)
	}
	runLine := regexp.MustCompile(`^#(\d)  \S+ \S+  ran \S+ +exit  exit 1  restarted (yes|no)$`)
	for i := range 3 {
		m := runLine.FindStringSubmatch(lines[2*i])
		wantRestarted := map[bool]string{true: "yes", false: "no"}[i < 2]
		if m == nil || m[1] != fmt.Sprint(i+1) || m[2] != wantRestarted {
			t.Errorf("history line %q: want run #%d, exit 1, restarted %s", lines[2*i], i+1, wantRestarted)
		}
		if lines[2*i+1] != "    | boom" {
			t.Errorf("history tail line %q, want %q", lines[2*i+1], "    | boom")
		}
	}
	runs := s.historyRuns(t, id)
	if len(runs) != 3 {
		t.Fatalf("--json history: %d runs, want 3: %v", len(runs), runs)
	}
	for i, r := range runs {
		if r["attempt"] != float64(i+1) || r["reason"] != "exit" || r["exitCode"] != float64(1) || r["restarted"] != (i < 2) ||
			!reflect.DeepEqual(r["tail"], []any{"boom"}) {
			t.Errorf("run %d: %v", i, r)
		}
	}
	ids := map[string]string{id: "JOB-S"}
	golden(t, "status-service", normalize(s.mustCtl(t, "status", id), ids))
	golden(t, "history", normalize(hist, ids))

	// start brings it back: a new supervision period, attempt 4.
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	started := jobOf(t, jsonObject(t, s.mustCtl(t, "--json", "start", id)))
	if started["attempt"] != float64(4) || started["jobId"] != id {
		t.Fatalf("start: %v, want attempt 4", started)
	}
	s.waitStatus(t, id, "running attempt 4", runningWith(4, 3*len("boom\n")+len("up\n")))
	st := s.mustCtl(t, "status", id)
	for _, want := range []string{`state:\s+running`, `restart:\s+on-failure`, `attempt:\s+4`, `restarts:\s+2 \(0 run ends within the restart window\)`, `uptime:\s+\d`} {
		if !regexp.MustCompile(want).MatchString(st) {
			t.Errorf("status of the running service does not match %q:\n%s", want, st)
		}
	}

	// restart ends run 4 (manual-restart) and starts run 5 at once. (The
	// reply shows the state when it was made: run 4 may have died of the
	// SIGTERM by then, and run 5 be on its way or started.)
	if out := s.mustCtl(t, "restart", id); out != id+" exiting (attempt 4 ends; attempt 5 starts once it has)\n" &&
		out != id+" restarting (attempt 4)\n" && out != id+" starting (attempt 5)\n" && out != id+" running (attempt 5)\n" {
		t.Fatalf("restart printed %q", out)
	}
	s.waitStatus(t, id, "running attempt 5", runningWith(5, 3*len("boom\n")+2*len("up\n")))

	// stop ends it for good; wait sees this period's end, not the earlier one.
	// (the reply shows the state when it was made: a run that dies of the
	// SIGTERM at once may already be finalized)
	if out := s.mustCtl(t, "stop", id); out != id+" exiting\n" && out != id+" exited\n" {
		t.Fatalf("stop printed %q, want %q", out, id+" exiting\n")
	}
	code, _, errs = s.ctl(t, "wait", id)
	if code != 128+15 || !strings.Contains(errs, "stopped") {
		t.Fatalf("wait after stop: exit %d stderr %q, want 143 (SIGTERM) and reason stopped", code, errs)
	}
	if job := s.jsonStatus(t, id); job["reason"] != "stopped" || job["attempt"] != float64(5) {
		t.Fatalf("status after stop: %v", job)
	}
	if out := s.mustCtl(t, "stop", id); out != id+" had already ended (stopped)\n" {
		t.Fatalf("second stop printed %q", out)
	}

	runs = s.historyRuns(t, id)
	if len(runs) != 5 {
		t.Fatalf("history after start, restart, stop: %d runs, want 5: %v", len(runs), runs)
	}
	for i, want := range []struct {
		reason    string
		restarted bool
	}{{"manual-restart", true}, {"stopped", false}} {
		r := runs[3+i]
		if r["attempt"] != float64(4+i) || r["reason"] != want.reason || r["restarted"] != want.restarted || !reflect.DeepEqual(r["tail"], []any{"up"}) {
			t.Errorf("run %d: %v, want reason %s, restarted %v, tail [up]", 4+i, r, want.reason, want.restarted)
		}
	}
	// logs -f goes on past the end of the first supervision period.
	code, out, errs := s.ctl(t, "logs", "-f", id)
	if code != 0 {
		t.Fatalf("logs -f: exit %d: %s", code, errs)
	}
	want := []string{"boom", "[run 1 ended: exit code 1; restarting in 50ms]", "boom", "[run 2 ended: exit code 1; restarting in 100ms]", "boom",
		"[ended: restart-limit (exit code 1)]", "up", "[run 4 ended: manual-restart (SIGTERM); restarting in 0s]", "up", "[ended: stopped (SIGTERM)]"}
	if got := prefixedLines(t, out, id)[id]; !reflect.DeepEqual(got, want) {
		t.Errorf("logs -f lines:\n%q\nwant\n%q", got, want)
	}
	// --lines limits the tail, in both outputs.
	if out := s.mustCtl(t, "history", "--lines", "0", id); strings.Contains(out, "|") || strings.Count(out, "\n") != 5 {
		t.Errorf("history --lines 0 shows output lines:\n%s", out)
	}
	for _, r := range s.historyRuns(t, id, "-n", "0") {
		if len(r["tail"].([]any)) != 0 {
			t.Errorf("--json history -n 0: run has a tail: %v", r)
		}
	}
}

// TestServiceOpsOnOneShotJobs: start and restart refuse a job without a
// restart policy, stop ends it, and its history is empty.
func TestServiceOpsOnOneShotJobs(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--", "sleep", "30")
	for _, op := range []string{"start", "restart"} {
		code, out, errs := s.ctl(t, op, id)
		if code != exitFailed || out != "" || !strings.Contains(errs, "execctl "+op+": job "+id+" is not a service") || !strings.Contains(errs, "(invalid-argument)") {
			t.Errorf("%s of a one-shot job: exit %d (want %d)\nstdout: %s\nstderr: %s", op, code, exitFailed, out, errs)
		}
	}
	if out := s.mustCtl(t, "history", id); !strings.Contains(out, id+" has no ended runs: history is kept for services") {
		t.Errorf("history of a one-shot job: %q", out)
	}
	if out := s.mustCtl(t, "--json", "history", id); out != `{"jobId":"`+id+`","runs":[]}`+"\n" {
		t.Errorf("--json history of a one-shot job: %q", out)
	}
	res := jsonObject(t, s.mustCtl(t, "--json", "stop", id))
	if res["alreadyFinished"] != false || jobOf(t, res)["jobId"] != id {
		t.Fatalf("--json stop: %v", res)
	}
	if job := s.waitExited(t, id); job["reason"] != "stopped" {
		t.Fatalf("stopped one-shot job: %v", job)
	}
	for _, op := range []string{"start", "restart", "stop", "history"} {
		if code, _, errs := s.ctl(t, op, "j-no-such-job"); code != exitNotFound || !strings.Contains(errs, "not-found") {
			t.Errorf("%s of an unknown job: exit %d stderr %q", op, code, errs)
		}
	}
}

// TestSpawnLimitsAndNotify: rlimits reach the program and status reports
// them; a notify job's status says whether it is ready.
func TestSpawnLimitsAndNotify(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--limit-nofile", "64", "--limit-as", "1G", "--memory-max", "64M", "--", "sh", "-c", "ulimit -n; ulimit -v")
	s.waitExited(t, id)
	if got := s.mustCtl(t, "poll", id); got != "64\n1048576\n" {
		t.Errorf("job output %q, want nofile 64 and 1048576 KiB of address space", got)
	}
	st := s.mustCtl(t, "status", id)
	if !regexp.MustCompile(`limits:\s+maxOpenFiles=64 maxAddressSpaceBytes=1073741824`).MatchString(st) {
		t.Errorf("status does not list the applied limits:\n%s", st)
	}
	// memory.max is applied with a cgroup per job, reported missing without.
	if !strings.Contains(st, "memory.max") {
		t.Errorf("status does not mention memory.max:\n%s", st)
	}

	n := s.spawnID(t, "--notify", "--", "sleep", "30")
	defer s.ctl(t, "kill", "--signal", "SIGKILL", n)
	if st := s.mustCtl(t, "status", n); !regexp.MustCompile(`ready:\s+no`).MatchString(st) {
		t.Errorf("status of a notify job does not say it is not ready:\n%s", st)
	}
	if env := s.jsonStatus(t, n); env["notify"] != true {
		t.Errorf("notify job: %v", env)
	}
}

// TestServiceFlagsToWire: spawn's service, notify and limits flags become
// the spawn arguments, optional ones only when given.
func TestServiceFlagsToWire(t *testing.T) {
	three, zero, five := 3, 0, 5
	cases := []struct {
		args []string
		want protocol.SpawnArgs
	}{
		{nil, protocol.SpawnArgs{}},
		{[]string{"--restart", "never"}, protocol.SpawnArgs{}},
		{[]string{"--restart", "always"}, protocol.SpawnArgs{Restart: &protocol.RestartPolicy{Policy: "always"}}},
		{[]string{"--restart", "on-failure", "--restart-delay", "500ms", "--backoff-multiplier", "1.5", "--max-delay", "1m", "--reset-after", "2s", "--max-restarts", "3", "--restart-window", "10s"},
			protocol.SpawnArgs{Restart: &protocol.RestartPolicy{Policy: "on-failure", RestartDelayMs: 500, BackoffMultiplier: 1.5, MaxDelayMs: 60000, ResetAfterMs: 2000, MaxRestarts: &three, RestartWindowMs: 10000}}},
		{[]string{"--restart", "always", "--max-restarts", "0"}, protocol.SpawnArgs{Restart: &protocol.RestartPolicy{Policy: "always", MaxRestarts: &zero}}},
		{[]string{"--notify", "--watchdog", "1.5s"}, protocol.SpawnArgs{Notify: true, WatchdogIntervalMs: 1500}},
		{[]string{"--limit-nofile", "64", "--limit-as", "256M", "--nice", "0", "--memory-max", "1G", "--cpu-weight", "50"},
			protocol.SpawnArgs{Limits: &protocol.ResourceLimits{MaxOpenFiles: 64, MaxAddressSpaceBytes: 256 << 20, Nice: &zero, MemoryMaxBytes: 1 << 30, CPUWeight: 50}}},
		{[]string{"--nice", "5"}, protocol.SpawnArgs{Limits: &protocol.ResourceLimits{Nice: &five}}},
	}
	for _, tc := range cases {
		fs := newFlags("spawn", &globals{stderr: &strings.Builder{}})
		o := serviceFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		var got protocol.SpawnArgs
		if err := o.apply(fs, &got); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v %+v %+v\nwant %+v %+v %+v", tc.args, got, got.Restart, got.Limits, tc.want, tc.want.Restart, tc.want.Limits)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{
		"": 0, "0": 0, "1048576": 1 << 20, "100B": 100, "4k": 4 << 10, "256M": 256 << 20, "256MiB": 256 << 20, "256mb": 256 << 20, "1G": 1 << 30, "2GiB": 2 << 30,
	} {
		if got, err := parseBytes("--x", in, math.MaxUint64); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"1X", "G", "-1", "1.5G", "1iB", "1 G", "1KK", "0x10", "18446744073709551616", "17179869184G"} {
		if got, err := parseBytes("--x", in, math.MaxUint64); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
	if _, err := parseBytes("--memory-max", "8589934592G", math.MaxInt64); err == nil {
		t.Errorf("--memory-max over int64: no error")
	}
}
