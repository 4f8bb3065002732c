package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
)

// These tests run the exec-supervisor binary (not the in-process server of
// startSupervisor): it is SIGKILLed, and a new one is started on the same
// state dir and endpoints.

// supervisorBinary builds exec-supervisor into a directory of the test's.
func supervisorBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(shortTempDir(t), "exec-supervisor")
	if out, err := exec.Command("go", "build", "-o", bin, "../exec-supervisor").CombinedOutput(); err != nil {
		t.Fatalf("build exec-supervisor: %v\n%s", err, out)
	}
	return bin
}

// supProc is one exec-supervisor process on dir's endpoints and state dir.
type supProc struct {
	cmd  *exec.Cmd
	log  *proctest.Buffer
	done chan struct{}
	dir  string
}

func (p *supProc) globals() []string {
	return []string{"--control", "ipc://" + filepath.Join(p.dir, "c.sock"), "--event", "ipc://" + filepath.Join(p.dir, "e.sock")}
}

// startSupProc starts exec-supervisor and waits until it answers health;
// the test's cleanup stops it (SIGTERM: it ends its jobs).
func startSupProc(t *testing.T, bin, dir string, extra ...string) *supProc {
	t.Helper()
	p := &supProc{log: &proctest.Buffer{}, done: make(chan struct{}), dir: dir}
	args := append([]string{"--state-dir", filepath.Join(dir, "state"), "--grace", "500ms", "--log-level", "debug"}, p.globals()...)
	p.cmd = exec.Command(bin, append(args, extra...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			t.Logf("supervisor log:\n%s", p.log)
		}
	})
	c := client.New(client.Options{ControlAddress: p.globals()[1], EventAddress: p.globals()[3], MaxReconnectAttempts: 1})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("supervisor exited during start:\n%s", p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("supervisor did not answer health within 20 s: %v\n%s", err, p.log)
		}
		time.Sleep(20 * time.Millisecond) // polling the starting process
	}
}

// kill9 kills the supervisor the hard way (its jobs run on, orphaned).
func (p *supProc) kill9() {
	p.cmd.Process.Kill()
	<-p.done
}

// freeAddr returns a loopback tcp address nothing listens on (for now).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// heldWaits scrapes exec_supervisor_held_waits from the metrics at addr
// (-1 if it cannot).
func heldWaits(addr string) int {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "exec_supervisor_held_waits "); ok {
			if n, err := strconv.ParseFloat(v, 64); err == nil {
				return int(n)
			}
		}
	}
	return -1
}

// ctlResult is how an execctl run ended.
type ctlResult struct {
	code      int
	out, errs string
}

// bgCtl runs execctl in the background; the test's cleanup interrupts it
// (if it still runs) and waits for it.
func bgCtl(t *testing.T, args ...string) <-chan ctlResult {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	ch, ended := make(chan ctlResult, 1), make(chan struct{})
	go func() {
		defer close(ended)
		var out, errb proctest.Buffer
		code := run(ctx, args, &out, &errb)
		ch <- ctlResult{code, out.String(), errb.String()}
	}()
	t.Cleanup(func() { cancel(); <-ended })
	return ch
}

func result(t *testing.T, what string, ch <-chan ctlResult, within time.Duration) ctlResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("%s still runs after %v", what, within)
	}
	return ctlResult{}
}

// runningJobs waits until the journal in state has a running job (with
// its process's fingerprint, which a restarted supervisor checks) for each
// of the sleep arguments and until the supervisor whose metrics are at
// metrics holds waits replies; it returns the jobs by sleep argument, and
// kills their process groups when the test ends (whatever recovered them).
func runningJobs(t *testing.T, state, metrics string, waits int, sleeps ...string) map[string]journal.Record {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		found := map[string]journal.Record{}
		if b, err := os.ReadFile(filepath.Join(state, "journal.json")); err == nil {
			var f journal.File
			if json.Unmarshal(b, &f) == nil {
				for _, r := range f.Jobs {
					if len(r.Argv) == 2 && r.Argv[0] == "sleep" && r.State == "running" && r.StartTicks != 0 {
						found[r.Argv[1]] = r
					}
				}
			}
		}
		all := true
		for _, s := range sleeps {
			if _, ok := found[s]; !ok {
				all = false
			}
		}
		if all && heldWaits(metrics) == waits {
			for _, r := range found {
				pgid := r.Pgid
				t.Cleanup(func() {
					if pgid > 1 && len(proctest.InGroup(pgid)) > 0 {
						syscall.Kill(-pgid, syscall.SIGKILL)
					}
				})
			}
			return found
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: journaled running jobs %v (want sleep %v), held waits %d (want %d)", found, sleeps, heldWaits(metrics), waits)
		}
		time.Sleep(20 * time.Millisecond) // the journal and the metrics have no change notification
	}
}

// TestWaitAcrossSupervisorRestart: `execctl wait JOB`, `spawn --wait` and
// `--json spawn --wait`, their waits held by a supervisor that is SIGKILLed
// and back only after longer than firstReachFor, ask the new one and end
// with the fate it recorded (supervisor-restart: 128+SIGKILL, as wait
// exits for it), naming the job. (wait gave up after firstReachFor, the
// bound for a supervisor never reached, as its held wait had no reply;
// spawn --wait got its job's id only with the reply to its held spawn,
// and failed at once without naming the job.)
func TestWaitAcrossSupervisorRestart(t *testing.T) {
	bin := supervisorBinary(t)
	dir := shortTempDir(t)
	metrics := freeAddr(t)
	p := startSupProc(t, bin, dir, "--metrics-addr", metrics)
	g := p.globals()
	code, out, errs := execctl(t, append(g, "spawn", "--", "sleep", "320")...)
	if code != 0 {
		t.Fatalf("spawn: exit %d: %s", code, errs)
	}
	waited := strings.TrimSpace(out)
	wait := bgCtl(t, append(g, "wait", waited)...)
	spawnWait := bgCtl(t, append(g, "spawn", "--wait", "--", "sleep", "321")...)
	jsonWait := bgCtl(t, append(g, "--json", "spawn", "--wait", "--", "sleep", "322")...)
	jobs := runningJobs(t, filepath.Join(dir, "state"), metrics, 3, "320", "321", "322")
	if jobs["320"].JobID != waited {
		t.Fatalf("journal: sleep 320 is %s, spawn said %s", jobs["320"].JobID, waited)
	}

	p.kill9()
	<-time.After(firstReachFor + time.Second) // the outage (part of the scenario, not a wait for anything)
	startSupProc(t, bin, dir, "--metrics-addr", "")

	const want = 128 + int(syscall.SIGKILL) // what wait exits with for a job ended by supervisor-restart
	for _, c := range []struct {
		name string
		ch   <-chan ctlResult
		job  string
	}{{"wait", wait, waited}, {"spawn --wait", spawnWait, jobs["321"].JobID}, {"--json spawn --wait", jsonWait, jobs["322"].JobID}} {
		r := result(t, c.name, c.ch, reconnectFor+15*time.Second)
		if r.code != want {
			t.Errorf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", c.name, r.code, want, r.out, r.errs)
			continue
		}
		if c.name == "--json spawn --wait" {
			job := jobOf(t, jsonObject(t, r.out))
			if job["jobId"] != c.job || job["state"] != "exited" || job["reason"] != "supervisor-restart" {
				t.Errorf("%s printed %s, want job %s exited with reason supervisor-restart", c.name, r.out, c.job)
			}
			continue
		}
		if w := "job " + c.job + " ended: supervisor-restart"; !strings.Contains(r.errs, w) {
			t.Errorf("%s: stderr %q does not say %q", c.name, r.errs, w)
		}
	}
}

// TestSpawnWaitSupervisorGone: with the supervisor gone for good, spawn
// --wait and wait give up after reconnectFor (shortened here) with exit 3,
// naming the job. (spawn --wait never named the job it left running.)
func TestSpawnWaitSupervisorGone(t *testing.T) {
	// (not parallel: parallel tests start after this one ended; restored
	// after the execctl runs of the cleanups below ended)
	saved := reconnectFor
	t.Cleanup(func() { reconnectFor = saved })
	reconnectFor = time.Second
	bin := supervisorBinary(t)
	dir := shortTempDir(t)
	metrics := freeAddr(t)
	p := startSupProc(t, bin, dir, "--metrics-addr", metrics)
	g := p.globals()
	code, out, errs := execctl(t, append(g, "spawn", "--", "sleep", "330")...)
	if code != 0 {
		t.Fatalf("spawn: exit %d: %s", code, errs)
	}
	waited := strings.TrimSpace(out)
	wait := bgCtl(t, append(g, "wait", waited)...)
	spawnWait := bgCtl(t, append(g, "spawn", "--wait", "--", "sleep", "331")...)
	jobs := runningJobs(t, filepath.Join(dir, "state"), metrics, 2, "330", "331")

	p.kill9()
	for _, c := range []struct {
		name string
		ch   <-chan ctlResult
		job  string
	}{{"wait", wait, waited}, {"spawn --wait", spawnWait, jobs["331"].JobID}} {
		r := result(t, c.name, c.ch, 15*time.Second)
		if r.code != exitUnreachable || !strings.Contains(r.errs, "waiting for job "+c.job+": no supervisor answering") {
			t.Errorf("%s: exit %d (want %d), stderr %q (want it to name job %s)", c.name, r.code, exitUnreachable, r.errs, c.job)
		}
	}
	// A supervisor on the same state directory ends what the dead one left
	// (its orphans, its job cgroups and their base, which stayed behind in
	// the cgroup tree after every run of this test), and is stopped.
	startSupProc(t, bin, dir, "--metrics-addr", "")
}

// TestWaitServiceAcrossGracefulRestart: `execctl wait` on a service whose
// supervisor is stopped (SIGTERM) and started again goes on with the
// resumed service (--resume-services) to its real end, rather than
// ending with the shutdown's supervisor-shutdown (exit 143 for a service
// that kept running).
func TestWaitServiceAcrossGracefulRestart(t *testing.T) {
	bin := supervisorBinary(t)
	dir := shortTempDir(t)
	metrics := freeAddr(t)
	p := startSupProc(t, bin, dir, "--metrics-addr", metrics)
	marker := filepath.Join(dir, "second-run")
	// The first run waits; the resumed one (the marker exists) exits 7.
	code, out, errs := execctl(t, append(p.globals(), "spawn", "--restart", "on-failure", "--max-restarts", "1", "--shell",
		"if [ -e "+marker+" ]; then exit 7; fi; touch "+marker+"; exec sleep 300")...)
	if code != 0 {
		t.Fatalf("spawn: exit %d: %s", code, errs)
	}
	id := strings.TrimSpace(out)
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(marker); err != nil; _, err = os.Stat(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the first run never started")
		}
		time.Sleep(10 * time.Millisecond) // polling for the marker
	}
	w := bgCtl(t, append(p.globals(), "wait", id)...)
	for deadline := time.Now().Add(10 * time.Second); heldWaits(metrics) != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the wait was never held")
		}
		time.Sleep(10 * time.Millisecond) // the metrics have no change notification
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	startSupProc(t, bin, dir, "--metrics-addr", "")
	r := result(t, "wait", w, 40*time.Second)
	if r.code != 7 || !strings.Contains(r.errs, "restart-limit") {
		t.Fatalf("wait: exit %d, %q; want the resumed service's end (restart-limit, its last run's exit 7)", r.code, r.errs)
	}
}

// TestFollowServiceAcrossGracefulRestart: `execctl spawn --follow` of a
// service whose supervisor is stopped (SIGTERM) and started again follows
// the resumed service to its real end (it ended with the shutdown's
// supervisor-shutdown, exit 143, while the service went on).
func TestFollowServiceAcrossGracefulRestart(t *testing.T) {
	bin := supervisorBinary(t)
	dir := shortTempDir(t)
	p := startSupProc(t, bin, dir, "--metrics-addr", "")
	marker := filepath.Join(dir, "second-run")
	f := bgCtl(t, append(p.globals(), "spawn", "--follow", "--restart", "on-failure", "--max-restarts", "1", "--shell",
		"if [ -e "+marker+" ]; then echo second; exit 7; fi; echo first; touch "+marker+"; exec sleep 300")...) // (first before the marker: the SIGTERM follows it)
	deadline := time.Now().Add(10 * time.Second)
	for _, err := os.Stat(marker); err != nil; _, err = os.Stat(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the first run never started")
		}
		time.Sleep(10 * time.Millisecond) // polling for the marker
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	startSupProc(t, bin, dir, "--metrics-addr", "")
	r := result(t, "spawn --follow", f, 60*time.Second)
	if r.code != 7 || !strings.Contains(r.out, "first") || !strings.Contains(r.out, "second") || !strings.Contains(r.errs, "restart-limit") {
		t.Fatalf("spawn --follow: exit %d, out %q, err %q; want both runs' output and the resumed service's end (restart-limit, exit 7)", r.code, r.out, r.errs)
	}
}

// TestWaitServiceNotResumed: when the next supervisor does not resume the
// service (--resume-services=false), wait ends at once with the
// shutdown's end (it waited 30 s for yet another supervisor).
func TestWaitServiceNotResumed(t *testing.T) {
	bin := supervisorBinary(t)
	dir := shortTempDir(t)
	p := startSupProc(t, bin, dir, "--metrics-addr", "", "--resume-services=false")
	code, out, errs := execctl(t, append(p.globals(), "spawn", "--restart", "always", "--", "sleep", "300")...)
	if code != 0 {
		t.Fatalf("spawn: exit %d: %s", code, errs)
	}
	id := strings.TrimSpace(out)
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	p2 := startSupProc(t, bin, dir, "--metrics-addr", "", "--resume-services=false")
	start := time.Now()
	r := result(t, "wait", bgCtl(t, append(p2.globals(), "wait", id)...), 20*time.Second)
	if r.code != 143 || !strings.Contains(r.errs, "supervisor-shutdown") || time.Since(start) > 10*time.Second {
		t.Fatalf("wait: exit %d, %q after %v; want 143, supervisor-shutdown, at once", r.code, r.errs, time.Since(start))
	}
}

// TestWaitServiceAcrossTwoGracefulRestarts: the wait goes on through a
// second graceful restart too (it ended at the second shutdown, exit 143,
// with the service running under the third supervisor).
func TestWaitServiceAcrossTwoGracefulRestarts(t *testing.T) {
	bin := supervisorBinary(t)
	dir := shortTempDir(t)
	count := filepath.Join(dir, "runs")
	runs := func() string { b, _ := os.ReadFile(count); return strings.TrimSpace(string(b)) }
	waitRuns := func(n string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); runs() != n; {
			if time.Now().After(deadline) {
				t.Fatalf("runs %q, want %s", runs(), n)
			}
			time.Sleep(10 * time.Millisecond) // polling the run counter
		}
	}
	waitHeld := func(metrics string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); heldWaits(metrics) != 1; {
			if time.Now().After(deadline) {
				t.Fatal("the wait was never held")
			}
			time.Sleep(10 * time.Millisecond) // the metrics have no change notification
		}
	}
	m1 := freeAddr(t)
	p := startSupProc(t, bin, dir, "--metrics-addr", m1)
	// Runs 1 and 2 wait (their supervisors are stopped); run 3 exits 7.
	code, out, errs := execctl(t, append(p.globals(), "spawn", "--restart", "on-failure", "--max-restarts", "1", "--shell",
		"n=$(cat "+count+" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "+count+"; [ $n -ge 3 ] && exit 7; exec sleep 300")...)
	if code != 0 {
		t.Fatalf("spawn: exit %d: %s", code, errs)
	}
	id := strings.TrimSpace(out)
	waitRuns("1")
	w := bgCtl(t, append(p.globals(), "wait", id)...)
	waitHeld(m1)
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	m2 := freeAddr(t)
	p2 := startSupProc(t, bin, dir, "--metrics-addr", m2)
	waitRuns("2")
	waitHeld(m2)
	p2.cmd.Process.Signal(syscall.SIGTERM)
	<-p2.done
	startSupProc(t, bin, dir, "--metrics-addr", "")
	r := result(t, "wait", w, 60*time.Second)
	if r.code != 7 || !strings.Contains(r.errs, "restart-limit") {
		t.Fatalf("wait: exit %d, %q; want the service's end under the third supervisor (restart-limit, exit 7)", r.code, r.errs)
	}
}
