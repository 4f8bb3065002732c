package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp/zmq4peer"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// These tests run the real exec-supervisor binary, kill it the hard way
// and check what the next run makes of it.

// binary and execctlBinary are built (with -race) by TestMain.
var binary, execctlBinary string

func TestMain(m *testing.M) {
	proctest.MaybeServeBareExec() // (the bare exec server of BenchmarkSpawnTrueBinary)
	dir, err := os.MkdirTemp("", "es-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "exec-supervisor")
	execctlBinary = filepath.Join(dir, "execctl")
	out, err := exec.Command("go", "build", "-race", "-o", dir+"/", ".", "../execctl").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build exec-supervisor, execctl: %v\n%s", err, out)
		os.Exit(1)
	}
	code := testenv.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// sup is one exec-supervisor process.
type sup struct {
	t        *testing.T
	cmd      *exec.Cmd
	log      *proctest.Buffer
	dir      string // state dir
	ctl, evt string
	client   *client.Client
	done     chan struct{}
	exitErr  error
}

// env is a state dir and endpoints shared by consecutive supervisors.
type env struct {
	root, state, ctl, evt string
	wrap                  []string // a command the binary is run through (its path and arguments follow)
}

func newEnv(t *testing.T) env {
	if testing.Short() {
		t.Skip("chaos suite (real supervisors killed and restarted): skipped with -short; run it with make chaos")
	}
	root, err := os.MkdirTemp("", "es-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	return env{root: root, state: filepath.Join(root, "state"),
		ctl: "ipc://" + filepath.Join(root, "c.sock"), evt: "ipc://" + filepath.Join(root, "e.sock")}
}

// start runs a supervisor and waits until it answers health.
func (e env) start(t *testing.T, extra ...string) *sup {
	t.Helper()
	s := e.launch(t, extra...)
	s.awaitHealth(t, 20*time.Second)
	return s
}

func (e env) launch(t *testing.T, extra ...string) *sup {
	t.Helper()
	args := append([]string{"--control", e.ctl, "--event", e.evt, "--state-dir", e.state, "--metrics-addr", "",
		"--log-level", "debug", "--grace", "500ms", "--chunk-merge-interval", "20ms"}, extra...)
	cmd := exec.Command(binary, args...)
	if len(e.wrap) > 0 {
		cmd = exec.Command(e.wrap[0], append(append(e.wrap[1:len(e.wrap):len(e.wrap)], binary), args...)...)
	}
	s := runSup(t, cmd, client.Options{ControlAddress: e.ctl, EventAddress: e.evt})
	s.dir = e.state
	return s
}

// runSup starts the supervisor cmd runs, with a client of opts (its
// request timeout and reconnects set here); the process is stopped
// (SIGTERM, then SIGKILL after 20 s) and its log shown on failure when
// the test ends.
func runSup(t *testing.T, cmd *exec.Cmd, opts client.Options) *sup {
	t.Helper()
	s := &sup{t: t, log: &proctest.Buffer{}, ctl: opts.ControlAddress, evt: opts.EventAddress, done: make(chan struct{}), cmd: cmd}
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exitErr = s.cmd.Wait(); close(s.done) }()
	opts.RequestTimeout, opts.MaxReconnectAttempts = 10*time.Second, 1
	s.client = client.New(opts)
	t.Cleanup(func() {
		s.client.Close()
		select {
		case <-s.done:
		default:
			s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(20 * time.Second):
				s.cmd.Process.Kill()
				<-s.done
			}
		}
		if t.Failed() {
			t.Logf("supervisor %s log:\n%s", s.ctl, s.log)
		}
	})
	return s
}

// awaitHealth waits until s answers health, at most d.
func (s *sup) awaitHealth(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		_, err := s.client.Health(hctx)
		hcancel()
		if err == nil {
			return
		}
		select {
		case <-s.done:
			t.Fatalf("supervisor %s exited during start (%v):\n%s", s.ctl, s.exitErr, s.log)
		case <-ctx.Done():
			t.Fatalf("supervisor %s did not answer health within %v: %v\n%s", s.ctl, d, err, s.log)
		case <-time.After(20 * time.Millisecond): // retry period while the process starts
		}
	}
}

func (s *sup) kill9() {
	s.cmd.Process.Kill()
	<-s.done
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// killGroups is a last-resort cleanup so that a failing test leaks nothing.
func killGroups(pgids []int) {
	for _, g := range pgids {
		if g > 1 && len(proctest.InGroup(g)) > 0 {
			syscall.Kill(-g, syscall.SIGKILL)
		}
	}
}

func readJournal(t *testing.T, path string) *journal.File {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f journal.File
	if err := json.Unmarshal(b, &f); err != nil {
		ents, _ := os.ReadDir(filepath.Dir(path))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("journal %s does not parse: %v (%d bytes: %.200q; dir %v)", path, err, len(b), b, names)
	}
	return &f
}

// waitJournal waits until the journal satisfies cond (it is written
// asynchronously after state changes).
func waitJournal(t *testing.T, path string, what string, cond func(*journal.File) bool) *journal.File {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil {
			var f journal.File
			if json.Unmarshal(b, &f) == nil && cond(&f) {
				return &f
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal never showed %s", what)
		}
		time.Sleep(20 * time.Millisecond) // the journal file has no change notification here
	}
}

var treeShapes = []string{
	"sleep 300",
	"sleep 300 & sleep 300 & wait",
	"sh -c 'sleep 300 & wait' & sleep 300 & wait",
	"trap '' TERM; sleep 300 & sleep 300 & wait", // ignores SIGTERM: needs the SIGKILL
	"while :; do echo tick; sleep 0.05; done",
}

// TestKill9ThenRestartReapsOrphans: SIGKILL the supervisor with 20 jobs
// running (shell trees with grandchildren among them); the next run records
// a fate for every job and leaves no process of any job alive.
func TestKill9ThenRestartReapsOrphans(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--journal-flush-interval", "100ms")
	ctx := ctxFor(t, 60*time.Second)
	var pgids []int
	ids := map[string]int{}
	for i := 0; i < 20; i++ {
		j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: treeShapes[i%len(treeShapes)]})
		if err != nil {
			t.Fatal(err)
		}
		pgids = append(pgids, j.Pgid)
		ids[j.JobID] = j.Pgid
	}
	// Two PTY jobs whose shells use job control: their background sleeps
	// sit in process groups of their own, in the job's session.
	var sessions []int
	for i := 0; i < 2; i++ {
		j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "set -m; sleep 300 & sleep 300 & echo bg-started; wait", Pty: &protocol.PtyArgs{}})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, j.Pgid)
		ids[j.JobID] = j.Pgid
	}
	t.Cleanup(func() {
		killGroups(pgids)
		for _, sid := range sessions {
			for _, g := range proctest.GroupsOfSession(sid) {
				syscall.Kill(-g, syscall.SIGKILL)
			}
		}
	})
	jpath := filepath.Join(e.state, "journal.json")
	for _, sid := range sessions {
		deadline := time.Now().Add(10 * time.Second)
		for len(proctest.GroupsOfSession(sid)) < 3 { // the shell's group + two job-control groups
			if time.Now().After(deadline) {
				t.Fatalf("session %d has groups %v, want 3", sid, proctest.GroupsOfSession(sid))
			}
			time.Sleep(20 * time.Millisecond) // waiting for the shell to start its jobs
		}
	}
	waitJournal(t, jpath, "22 running jobs with fingerprints, PTY sessions with their members", func(f *journal.File) bool {
		n, ptyOK := 0, 0
		for _, r := range f.Jobs {
			if r.State == "running" && r.StartTicks != 0 && r.BootID != "" {
				n++
			}
			if r.Pty && len(r.Members) >= 3 {
				ptyOK++
			}
		}
		return n == 22 && ptyOK == 2
	})
	s.kill9()
	// The orphans live on after the supervisor's death (the chatty ones
	// may die of SIGPIPE: their output pipe lost its reader).
	alive := 0
	for _, g := range pgids {
		if len(proctest.InGroup(g)) > 0 {
			alive++
		}
	}
	if alive < 16 {
		t.Fatalf("expected at least the 16 quiet orphaned groups alive after SIGKILL, found %d", alive)
	}
	s2 := e.start(t)
	for _, g := range pgids {
		if live := proctest.InGroup(g); len(live) > 0 {
			t.Errorf("process group %d still has live processes %v after recovery", g, live)
		}
	}
	for _, sid := range sessions {
		if gs := proctest.GroupsOfSession(sid); len(gs) > 0 {
			t.Errorf("PTY session %d still has live process groups %v after recovery", sid, gs)
		}
	}
	list, err := s2.client.ListJobs(ctx, protocol.ListJobsArgs{})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, j := range list {
		if _, ok := ids[j.JobID]; !ok {
			continue
		}
		seen++
		if j.State != protocol.StateExited || j.Reason != protocol.ReasonSupervisorRestart || j.Error == "" {
			t.Errorf("job %s: state %s reason %s note %q", j.JobID, j.State, j.Reason, j.Error)
		}
	}
	if seen != 22 {
		t.Fatalf("%d of 22 jobs have a recorded fate", seen)
	}
	if n := strings.Count(s2.log.String(), "reconcile: orphan found alive and terminated"); n < 16 {
		t.Fatalf("%d structured reconcile records of terminated orphans in the log, want >= 16", n)
	}
	// The recovered chatty job still offers its output tail to poll.
	for id, g := range ids {
		_ = g
		res, err := s2.client.Poll(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n := res.Job.StdoutBytes + res.Job.StderrBytes; n > 0 && len(res.Chunks) == 0 {
			t.Errorf("job %s had %d bytes of output but no tail was recovered", id, n)
		}
	}
}

// TestPidReuseGuard: a journal record whose pid now belongs to an
// unrelated process (different start time) leaves that process alone. So
// does the record of a service waiting to restart, whatever its last run's
// pid and group now are (its run was reaped: their numbers may be anyone's;
// the journal used to be refused whole for its state, and once accepted,
// the group was terminated on the strength of recorded members).

func TestPidReuseGuard(t *testing.T) {
	e := newEnv(t)
	victim := exec.Command("sleep", "300")
	victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	ticks, err := proc.StartTicks(victim.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.state, 0o700); err != nil {
		t.Fatal(err)
	}
	pid := victim.Process.Pid
	// Another live process in a group of its own: a record naming our
	// victim (fingerprint and all) with this one's group must not get
	// that group terminated (a hostile-journal audit had it killed).
	bystander := exec.Command("sleep", "300")
	bystander.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bystander.Process.Kill(); bystander.Wait() })
	other := bystander.Process.Pid
	doc := &journal.File{InstanceID: "dead-instance", Jobs: []journal.Record{
		{JobID: "j-other-group", Shell: "sleep 300", Pid: pid, Pgid: other, StartTicks: ticks, BootID: proc.BootID(), State: "running", CreatedAt: time.Now().UnixMilli()},
		{JobID: "j-own-group", Shell: "sleep 300", Pid: pid, Pgid: syscall.Getpgrp(), StartTicks: ticks, BootID: proc.BootID(), State: "running", CreatedAt: time.Now().UnixMilli()},
		{JobID: "j-reused", Shell: "sleep 300", Pid: pid, Pgid: pid, StartTicks: ticks + 12345, BootID: proc.BootID(), State: "running", CreatedAt: time.Now().UnixMilli()},
		{JobID: "j-otherboot", Shell: "sleep 300", Pid: pid, Pgid: pid, StartTicks: ticks, BootID: "another-boot", State: "running", CreatedAt: time.Now().UnixMilli()},
		{JobID: "j-gone", Shell: "true", Pid: 4194000, Pgid: 4194000, StartTicks: 1, BootID: proc.BootID(), State: "running"},
		{JobID: "j-done", Shell: "true", Pid: 77, State: "exited", Reason: "exit", ExitCode: ptr(0), EndedAt: time.Now().UnixMilli()},
		{JobID: "j-between-runs", Shell: "exit 0", Pid: pid, Pgid: pid, StartTicks: ticks, BootID: proc.BootID(), State: "restarting",
			CreatedAt: time.Now().UnixMilli(), Members: []journal.Member{{Pid: pid, StartTicks: ticks}},
			Service: &journal.Service{Spec: protocol.SpawnArgs{Shell: "exit 0", Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}}, Attempt: 1}},
	}}
	if err := journal.New(filepath.Join(e.state, "journal.json")).Save(doc); err != nil {
		t.Fatal(err)
	}
	s := e.start(t)
	if err := syscall.Kill(pid, 0); err != nil || len(proctest.InGroup(pid)) == 0 {
		t.Fatalf("the unrelated process %d was touched: %v", pid, err)
	}
	if err := syscall.Kill(other, 0); err != nil || len(proctest.InGroup(other)) == 0 {
		t.Fatalf("the group named by a record of another process was terminated: %v", err)
	}
	ctx := ctxFor(t, 10*time.Second)
	if strings.Contains(s.log.String(), "journal unusable") {
		t.Fatalf("the journal was refused:\n%s", s.log)
	}
	for id, want := range map[string]string{"j-reused": "unrelated process", "j-otherboot": "unrelated process", "j-gone": "was gone"} {
		info, err := s.client.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Reason != protocol.ReasonSupervisorRestart || !strings.Contains(info.Error, want) {
			t.Errorf("%s: reason %s note %q (want %q)", id, info.Reason, info.Error, want)
		}
	}
	info, err := s.client.Status(ctx, "j-done")
	if err != nil || info.Reason != protocol.ReasonExit {
		t.Fatalf("a job finished before the crash keeps its fate: %+v %v", info, err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestSingleOwner: a second supervisor on the same state directory
// refuses to start and names the holder; once the first is SIGKILLed, a new
// one takes over its stale lock.
func TestSingleOwner(t *testing.T) {
	e := newEnv(t)
	a := e.start(t)
	other := e
	other.ctl = "ipc://" + filepath.Join(e.root, "c2.sock")
	other.evt = "ipc://" + filepath.Join(e.root, "e2.sock")
	b := other.launch(t)
	select {
	case <-b.done:
	case <-time.After(15 * time.Second):
		t.Fatal("second supervisor did not exit")
	}
	if ee, ok := b.exitErr.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("second supervisor exit: %v", b.exitErr)
	}
	if want := fmt.Sprintf("locked by pid %d", a.cmd.Process.Pid); !strings.Contains(b.log.String(), want) {
		t.Fatalf("second supervisor's error does not name the holder (%q):\n%s", want, b.log)
	}
	a.kill9()
	c := e.start(t)
	if _, err := c.client.Health(ctxFor(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptJournal: whatever is in the journal file, the supervisor
// starts, moves the file aside and says so.
func TestCorruptJournal(t *testing.T) {
	valid, _ := json.Marshal(&journal.File{Version: journal.Version, InstanceID: "x", Jobs: []journal.Record{{JobID: "j-1", State: "running", Pid: 5}}})
	rnd := make([]byte, 4096)
	for i := range rnd {
		rnd[i] = byte(rand.IntN(256))
	}
	cases := map[string][]byte{
		"truncated":   valid[:len(valid)/2],
		"random":      rnd,
		"wrong shape": []byte(`{"jobs": {"a": 1}, "surprise": true}`),
		"array":       []byte(`[1, 2, 3]`),
		"version":     []byte(`{"version": 99, "jobs": []}`),
		// (one invalid record: left out, the file kept as it was read)
		"empty record": []byte(`{"version": 1, "jobs": [{}]}`),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			if err := os.MkdirAll(e.state, 0o700); err != nil {
				t.Fatal(err)
			}
			jpath := filepath.Join(e.state, "journal.json")
			if err := os.WriteFile(jpath, content, 0o600); err != nil {
				t.Fatal(err)
			}
			s := e.start(t)
			if name == "empty record" {
				kept, _ := filepath.Glob(jpath + ".partial-*")
				if len(kept) != 1 || !strings.Contains(s.log.String(), "journal records invalid") {
					t.Fatalf("want the record left out and the file kept once, found %v:\n%s", kept, s.log)
				}
				return
			}
			moved, _ := filepath.Glob(jpath + ".corrupt-*")
			if len(moved) != 1 {
				t.Fatalf("want the journal moved aside once, found %v", moved)
			}
			if b, _ := os.ReadFile(moved[0]); !bytes.Equal(b, content) {
				t.Fatal("moved-aside journal does not hold the original bytes")
			}
			if !strings.Contains(s.log.String(), "journal unusable; moved aside") {
				t.Fatalf("log does not report the corrupt journal:\n%s", s.log)
			}
			// And the supervisor works, writing a fresh journal.
			waitJournal(t, jpath, "a fresh valid journal", func(f *journal.File) bool { return f.Version == journal.Version })
		})
	}
}

// TestSIGTERMWithRunningJobs: SIGTERM with 20 running jobs: exit 0 within
// the grace plus a small bound, no child survives, and the journal records
// every job as terminated by the shutdown.
func TestSIGTERMWithRunningJobs(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	var pgids []int
	for i := 0; i < 20; i++ {
		j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: treeShapes[i%len(treeShapes)]})
		if err != nil {
			t.Fatal(err)
		}
		pgids = append(pgids, j.Pgid)
	}
	t.Cleanup(func() { killGroups(pgids) })
	start := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		t.Fatal("supervisor did not exit within 15 s of SIGTERM")
	}
	took := time.Since(start)
	if s.exitErr != nil {
		t.Fatalf("exit: %v\n%s", s.exitErr, s.log)
	}
	if took > 500*time.Millisecond+5*time.Second {
		t.Fatalf("shutdown took %v (grace 500ms)", took)
	}
	for _, g := range pgids {
		if live := proctest.InGroup(g); len(live) > 0 {
			t.Errorf("group %d survived shutdown: %v", g, live)
		}
	}
	f := readJournal(t, filepath.Join(e.state, "journal.json"))
	n := 0
	for _, r := range f.Jobs {
		if r.State == "exited" && r.Reason == protocol.ReasonShutdown {
			n++
		}
	}
	if n != 20 {
		t.Fatalf("journal records %d of 20 jobs as ended by the shutdown", n)
	}
	t.Logf("shutdown with 20 jobs took %v", took)
}

// TestSecondSignalForcesFastExit: with a job that ignores SIGTERM and a
// long grace, a second SIGTERM ends the shutdown at once.
func TestSecondSignalForcesFastExit(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--grace", "60s")
	ctx := ctxFor(t, 30*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "trap '' TERM; echo up; while :; do sleep 0.1; done"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	s.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.log.String(), "job kill") {
		if time.Now().After(deadline) {
			t.Fatal("shutdown did not start")
		}
		time.Sleep(10 * time.Millisecond) // waiting for the log line of the first phase
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("second SIGTERM did not force a fast exit")
	}
	if live := proctest.InGroup(j.Pgid); len(live) > 0 {
		t.Fatalf("job survived a forced shutdown: %v", live)
	}
}

// TestKill9DuringJournalWrites: SIGKILL at random moments while the
// journal is rewritten every 10 ms; the file on disk always parses as a
// complete journal.
func TestKill9DuringJournalWrites(t *testing.T) {
	e := newEnv(t)
	jpath := filepath.Join(e.state, "journal.json")
	var pgids []int
	t.Cleanup(func() { killGroups(pgids) })
	for i := 0; i < 8; i++ {
		s := e.start(t, "--journal-flush-interval", "10ms")
		ctx := ctxFor(t, 20*time.Second)
		for k := 0; k < 3; k++ {
			j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "while :; do echo line-$RANDOM; sleep 0.002; done"})
			if err != nil {
				t.Fatal(err)
			}
			pgids = append(pgids, j.Pgid)
		}
		time.Sleep(time.Duration(20+rand.IntN(150)) * time.Millisecond) // a random moment to crash at
		s.kill9()
		f := readJournal(t, jpath)
		if f.Version != journal.Version {
			t.Fatalf("iteration %d: journal version %d", i, f.Version)
		}
	}
	// The last run's orphans are reaped by one more start.
	e.start(t)
	for _, g := range pgids {
		if live := proctest.InGroup(g); len(live) > 0 {
			t.Errorf("group %d still alive: %v", g, live)
		}
	}
}

// TestOrphanedDescendantsOfDeadLeader: the supervisor dies, then the job's
// leader exits, leaving a background child in the group. The group members
// recorded by the periodic journal scan prove the group is still the job's,
// so the next run terminates it.
func TestOrphanedDescendantsOfDeadLeader(t *testing.T) {
	deadLeaderLeavesDescendant(t, "--journal-flush-interval", "50ms")
}

// deadLeaderLeavesDescendant spawns a job whose leader ends after the
// supervisor (started with flags) was killed, leaving a background child
// in its group, once the journal has the group's members; the next run
// (same flags) terminates the child.
func deadLeaderLeavesDescendant(t *testing.T, flags ...string) {
	e := newEnv(t)
	s := e.start(t, flags...)
	ctx := ctxFor(t, 30*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 300 & exec sleep 2"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the job's group members", func(f *journal.File) bool {
		return slices.ContainsFunc(f.Jobs, func(r journal.Record) bool { return r.JobID == j.JobID && len(r.Members) >= 2 })
	})
	s.kill9()
	deadline := time.Now().Add(10 * time.Second)
	for proc.Identify(j.Pid, 0, "") != proc.Gone { // the leader (sleep 2) ends on its own
		if time.Now().After(deadline) {
			t.Fatal("leader did not exit")
		}
		time.Sleep(20 * time.Millisecond) // no notification for a non-child's exit
	}
	if len(proctest.InGroup(j.Pgid)) == 0 {
		t.Fatal("the background child should still be alive in the group")
	}
	s2 := e.start(t, flags...)
	if live := proctest.InGroup(j.Pgid); len(live) > 0 {
		t.Fatalf("orphaned descendants %v survived the recovery", live)
	}
	info, err := s2.client.Status(ctx, j.JobID)
	if err != nil || !strings.Contains(info.Error, "terminated") {
		t.Fatalf("status: %+v %v", info, err)
	}
}

// TestShutdownWaitMode: with --shutdown wait, SIGTERM lets running jobs
// finish on their own (reason exit), refuses new spawns meanwhile, then exits 0.
func TestShutdownWaitMode(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--shutdown", "wait", "--shutdown-timeout", "20s")
	ctx := ctxFor(t, 30*time.Second)
	gate := filepath.Join(e.root, "gate")
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "while [ ! -e " + gate + " ]; do sleep 0.02; done; echo finished"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	s.cmd.Process.Signal(syscall.SIGTERM)
	// While waiting, the supervisor answers but refuses new jobs.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}})
		if protocol.CodeOf(err) == protocol.CodeShuttingDown {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spawn during shutdown: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // until the signal has been handled
	}
	select {
	case <-s.done:
		t.Fatal("supervisor exited before its job finished")
	default:
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		t.Fatal("supervisor did not exit after its job finished")
	}
	if s.exitErr != nil {
		t.Fatalf("exit: %v", s.exitErr)
	}
	f := readJournal(t, filepath.Join(e.state, "journal.json"))
	for _, r := range f.Jobs {
		if r.JobID == j.JobID && (r.Reason != "exit" || r.ExitCode == nil || *r.ExitCode != 0) {
			t.Fatalf("job recorded as %+v", r)
		}
	}
}

// rssKiB reads VmRSS and VmHWM (peak) of pid.
func rssKiB(pid int) (rss, hwm int64) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				rss = v
			case "VmHWM:":
				hwm = v
			}
		}
	}
	return rss, hwm
}

// TestSlowSubscriberRSS: a subscriber that never reads while a job prints
// 100 MB is disconnected; a follower still gets every byte; the
// supervisor's peak RSS stays under 256 MiB (ring 2 MiB per job, event
// queue 1000 events, 8 MiB per subscriber queue, plus the runtime).
func TestSlowSubscriberRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MB of output: skipped with -short")
	}
	e := newEnv(t)
	s := e.start(t, "--write-timeout", "500ms", "--ring-buffer", "2097152")
	ctx := ctxFor(t, 120*time.Second)
	slow, err := zmq4peer.Dial(ctx, zmq4peer.Sub, e.evt, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if err := slow.SetOption(zmq4peer.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	_, before := rssKiB(s.cmd.Process.Pid)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "head -c 104857600 /dev/zero"})
	if err != nil {
		t.Fatal(err)
	}
	var got, lost int64
	err = s.client.Follow(ctx, j.JobID, 1, func(ev protocol.Event) error {
		switch ev.Kind {
		case protocol.KindStdout:
			var p protocol.OutputPayload
			if err := ev.DecodePayload(&p); err != nil {
				return err
			}
			got += int64(len(p.Data))
		case protocol.KindGap:
			lost++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, peak := rssKiB(s.cmd.Process.Pid)
	t.Logf("supervisor RSS peak %d MiB (before the job: %d MiB); follower got %d bytes, %d gap reports", peak>>10, before>>10, got, lost)
	if peak > 256<<10 {
		t.Fatalf("supervisor RSS peaked at %d MiB (bound 256 MiB)", peak>>10)
	}
	// With a 2 MiB ring a slow follower may lose output, but it must be
	// told: what it got plus what the gaps cover is everything.
	if got != 100<<20 && lost == 0 {
		t.Fatalf("follower got %d of %d bytes without a gap report", got, 100<<20)
	}
	if !strings.Contains(s.log.String(), "slow-subscriber") && !strings.Contains(s.log.String(), "slow-peer-write-timeout") {
		t.Fatalf("the never-reading subscriber was not cut off:\n%s", s.log)
	}
	// Over ipc the peer has no address: the log names its pid.
	if !regexp.MustCompile(`connection rejected.*remote="pid [0-9]+"`).MatchString(s.log.String()) {
		t.Fatalf("the rejection does not name the peer's pid:\n%s", s.log)
	}
}

// TestClientSeesSupervisorRestart: the supervisor is killed -9 and
// restarted while a client follows a job (push and poll modes). With its
// journal, the restarted supervisor knows the job: the follower goes on
// and gets, after what it already had (never twice), a gap for what may
// have been lost and the job's end, job.failed with reason
// supervisor-restart; the orphan is terminated. Without a journal (another
// state dir), Follow ends with ErrSupervisorRestarted.
func TestClientSeesSupervisorRestart(t *testing.T) {
	for _, mode := range []client.SubscribeMode{client.SubscribePush, client.SubscribePoll} {
		for _, journalKept := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/journal-kept=%v", mode, journalKept), func(t *testing.T) {
				e := newEnv(t)
				s := e.start(t, "--heartbeat-interval", "100ms")
				ctx := ctxFor(t, 60*time.Second)
				c := client.New(client.Options{ControlAddress: e.ctl, EventAddress: e.evt, RequestTimeout: 2 * time.Second,
					MaxReconnectAttempts: 20, ReconnectInterval: 200 * time.Millisecond, SubscribeMode: mode, PollInterval: 50 * time.Millisecond})
				defer c.Close()
				j, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "echo started; exec sleep 300"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { killGroups([]int{j.Pgid}) })
				var evs []protocol.Event
				var out bytes.Buffer
				gotOutput := make(chan struct{})
				restarted := false
				errc := make(chan error, 1)
				go func() {
					errc <- c.Follow(ctx, j.JobID, 1, func(ev protocol.Event) error {
						evs = append(evs, ev)
						if ev.Kind == protocol.KindStdout {
							if o, err := ev.Output(); err == nil {
								out.Write(o.Data)
							}
							if !restarted && strings.Contains(out.String(), "started\n") {
								restarted = true
								close(gotOutput)
							}
						}
						return nil
					})
				}()
				select {
				case <-gotOutput:
				case err := <-errc:
					t.Fatalf("follow ended before the restart: %v", err)
				case <-ctx.Done():
					t.Fatal("no output")
				}
				s.kill9()
				e2 := e
				if !journalKept {
					e2.state = filepath.Join(e.root, "other-state")
				}
				other := e2.start(t, "--heartbeat-interval", "100ms")
				var ferr error
				select {
				case ferr = <-errc:
				case <-ctx.Done():
					t.Fatal("the follower did not end after the restart")
				}
				if !journalKept {
					var pe *protocol.Error
					if !errors.Is(ferr, client.ErrSupervisorRestarted) || !errors.As(ferr, &pe) || pe.Code != protocol.CodeNotFound {
						t.Fatalf("follow after a restart that lost the job: %v", ferr)
					}
					// A supervisor on the first state directory again reaps
					// what the dead one left (its job's cgroup and base).
					other.cmd.Process.Signal(syscall.SIGTERM)
					<-other.done
					e.start(t)
					return
				}
				if ferr != nil {
					t.Fatalf("follow across the restart: %v", ferr)
				}
				// Each seq once, in order; the output once; then a gap
				// (the seqs the journal may not have seen) and the end.
				var last uint64
				for _, ev := range evs {
					if ev.Kind != protocol.KindGap {
						if ev.Seq <= last {
							t.Fatalf("seq %d after %d: %+v", ev.Seq, last, evs)
						}
						last = ev.Seq
					}
				}
				if out.String() != "started\n" {
					t.Fatalf("output %q", out.String())
				}
				n := len(evs)
				if n < 2 || evs[n-2].Kind != protocol.KindGap || evs[n-1].Kind != protocol.KindFailed {
					t.Fatalf("events after the restart: %+v", evs)
				}
				var end protocol.ExitPayload
				if err := evs[n-1].DecodePayload(&end); err != nil || end.Reason != protocol.ReasonSupervisorRestart {
					t.Fatalf("end %+v %v", end, err)
				}
				info, err := c.Status(ctx, j.JobID)
				if err != nil || info.Reason != protocol.ReasonSupervisorRestart {
					t.Fatalf("recorded fate: %+v %v", info, err)
				}
				if live := proctest.InGroup(info.Pgid); len(live) > 0 || !strings.Contains(info.Error, "terminated") {
					t.Fatalf("the orphan was not terminated (%q); still alive: %v", info.Error, live)
				}
			})
		}
	}
}

// jobCgroupProcs reads the processes of a running job's cgroup (its
// status names it); nil when cgroups are not in use.
func jobCgroupProcs(s *sup, id string) []int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := s.client.Status(ctx, id)
	if err != nil || info.Cgroup == "" {
		return nil
	}
	if cg := cgroups.Open(info.Cgroup); cg != nil {
		return cg.Procs()
	}
	return nil
}

// TestEscapeTreeAcrossShutdownAndCrash: children that left their process
// group (setsid, double fork, nohup) are gone after a SIGTERM shutdown, and
// after a SIGKILL of the supervisor followed by a restart.
func TestEscapeTreeAcrossShutdownAndCrash(t *testing.T) {
	const tree = `setsid sleep 300 & (sleep 300 &) ; nohup sleep 300 >/dev/null 2>&1 & echo up; sleep 300`
	for _, how := range []string{"sigterm", "sigkill-restart"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			s := e.start(t)
			_, members := spawnTreeInCgroup(t, s, tree, 5)
			if how == "sigterm" {
				s.cmd.Process.Signal(syscall.SIGTERM)
				<-s.done
			} else {
				s.kill9()
				n := 0
				for _, p := range members {
					if proctest.Alive(p) {
						n++
					}
				}
				t.Logf("%d of %d processes alive as orphans after SIGKILL", n, len(members))
				e.start(t)
			}
			for _, p := range members {
				if proctest.Alive(p) {
					t.Errorf("process %d of the job survived (%s)", p, how)
				}
			}
		})
	}
}

// TestRestartFindsLeftoverCgroupsElsewhere: after a SIGKILL, the next run
// terminates what is left in the job cgroups of the previous one even when
// it names the state directory otherwise (a trailing slash before, a
// symlinked parent now: the base was named from the raw string, so the
// leftovers were looked for in another base and a setsid child survived),
// or puts job cgroups under another --cgroup-parent (the journal's
// recorded cgroup path is followed). The old cgroups are removed.
func TestRestartFindsLeftoverCgroupsElsewhere(t *testing.T) {
	const tree = `setsid sleep 300 & echo up; sleep 300`
	for _, how := range []string{"state-dir spelled otherwise", "another cgroup parent"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			s := e.start(t, "--state-dir", e.state+"/", "--journal-flush-interval", "100ms")
			ctx := ctxFor(t, 30*time.Second)
			j, members := spawnTreeInCgroup(t, s, tree, 3)
			info, err := s.client.Status(ctx, j.JobID)
			if err != nil {
				t.Fatal(err)
			}
			waitJournal(t, filepath.Join(e.state, "journal.json"), "the job running in its cgroup", func(f *journal.File) bool {
				return len(f.Jobs) == 1 && f.Jobs[0].State == "running" && f.Jobs[0].Cgroup == info.Cgroup
			})
			// A job the journal has no record of yet (spawned just before the
			// crash): a cgroup of the same base, with a process in it.
			var unrecorded *exec.Cmd
			unrecordedCg := filepath.Join(filepath.Dir(info.Cgroup), "c-unrecorded-1")
			if how == "another cgroup parent" {
				if err := os.Mkdir(unrecordedCg, 0o755); err != nil {
					t.Fatal(err)
				}
				unrecorded = exec.Command("sleep", "300")
				if err := unrecorded.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { unrecorded.Process.Kill(); unrecorded.Wait(); os.Remove(unrecordedCg) })
				if err := os.WriteFile(filepath.Join(unrecordedCg, "cgroup.procs"), []byte(strconv.Itoa(unrecorded.Process.Pid)), 0); err != nil {
					t.Fatal(err)
				}
			}
			s.kill9()
			var extra []string
			if how == "state-dir spelled otherwise" {
				link := filepath.Join(t.TempDir(), "link")
				if err := os.Symlink(e.root, link); err != nil {
					t.Fatal(err)
				}
				extra = []string{"--state-dir", filepath.Join(link, "state")}
			} else {
				parent := filepath.Join(filepath.Dir(filepath.Dir(info.Cgroup)), fmt.Sprintf("es-test-parent-%d", os.Getpid()))
				if err := os.Mkdir(parent, 0o755); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if ents, err := os.ReadDir(parent); err == nil {
						for _, e := range ents {
							os.Remove(filepath.Join(parent, e.Name()))
						}
					}
					os.Remove(parent)
				})
				extra = []string{"--cgroup-parent", parent}
			}
			s2 := e.start(t, extra...)
			for _, p := range members {
				if proctest.Alive(p) {
					t.Errorf("process %d of the job survived the restart (%s)", p, how)
				}
			}
			if _, err := os.Stat(info.Cgroup); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the old job cgroup %s is still there (%v)", info.Cgroup, err)
			}
			if unrecorded != nil {
				// (our child: reaped here, so "dead" is its wait returning)
				done := make(chan struct{})
				go func() { unrecorded.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Errorf("the unrecorded job's process survived the restart")
				}
				if _, err := os.Stat(unrecordedCg); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the unrecorded job's cgroup is still there (%v)", err)
				}
			}
			if !strings.Contains(s2.log.String(), "reconcile: orphan found alive and terminated") {
				t.Errorf("no reconcile record in the log")
			}
		})
	}
}

// TestRestartTerminatesLeftoversTogether: the orphans of several jobs
// that ignore SIGTERM share one grace period at the restart (they were
// terminated one cgroup after another: N jobs held the restart, and every
// client, for N grace periods).
func TestRestartTerminatesLeftoversTogether(t *testing.T) {
	const n, grace = 5, time.Second
	e := newEnv(t)
	s := e.start(t, "--journal-flush-interval", "100ms")
	ctx := ctxFor(t, 30*time.Second)
	if h, err := s.client.Health(ctx); err != nil || !h.Cgroups {
		t.Skipf("no cgroup per job here (%v %s)", err, h.CgroupsNote)
	}
	var pgids []int
	for i := 0; i < n; i++ {
		j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: `trap '' TERM; sleep 300 & wait`})
		if err != nil {
			t.Fatal(err)
		}
		pgids = append(pgids, j.Pgid)
	}
	t.Cleanup(func() { killGroups(pgids) })
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the jobs running", func(f *journal.File) bool {
		k := 0
		for _, r := range f.Jobs {
			if r.State == "running" && r.Cgroup != "" {
				k++
			}
		}
		return k == n
	})
	s.kill9()
	start := time.Now()
	e.start(t, "--grace", grace.String())
	took := time.Since(start)
	for _, g := range pgids {
		if live := proctest.InGroup(g); len(live) > 0 {
			t.Errorf("group %d still has %v", g, live)
		}
	}
	// One after another it takes n graces at least; together, one (and
	// the start).
	if took >= time.Duration(n-1)*grace {
		t.Fatalf("the restart took %v with %d jobs ignoring SIGTERM and a grace of %v: terminated one at a time", took, n, grace)
	}
	t.Logf("restart with %d leftover jobs ignoring SIGTERM took %v (grace %v)", n, took, grace)
}

// TestCrashKeepsUnpublishedOutput: output a job printed that was still
// inside the merge window when the journal was written (counted in its
// stream bytes, not yet published as events) comes back after the
// supervisor is SIGKILLed and restarted, at its offsets, and the job's
// byte counts match what it printed. It used to be lost without a word:
// stdoutBytes 13893, outputEnd 0, nothing to poll, no loss reported. More
// than a record keeps (4 KiB) is published when the record is taken: it
// is in the tail, and what is older is reported lost.
func TestCrashKeepsUnpublishedOutput(t *testing.T) {
	for _, n := range []int{500, 3000} { // 1892 and 13893 bytes
		t.Run(fmt.Sprintf("seq %d", n), func(t *testing.T) {
			e := newEnv(t)
			s := e.start(t, "--journal-flush-interval", "100ms", "--chunk-merge-interval", "1m")
			ctx := ctxFor(t, 30*time.Second)
			// A quiet stream's output is published at once: "a" and "b"
			// (the job waits for a line before each next one) open the
			// streams' windows, and what follows stays in them.
			j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: fmt.Sprintf("printf a; read l; printf b >&2; read l; seq 1 %d; echo err >&2; exec sleep 300", n), Stdin: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killGroups([]int{j.Pgid}) })
			for end := int64(1); end <= 2; end++ {
				for deadline := time.Now().Add(10 * time.Second); ; {
					st, err := s.client.Status(ctx, j.JobID)
					if err == nil && st.OutputEnd == end {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("output end %d (%v), want %d: the job's opening output was not published", st.OutputEnd, err, end)
					}
					time.Sleep(10 * time.Millisecond) // polling the job's status
				}
				if _, err := s.client.Write(ctx, j.JobID, []byte("\n"), false); err != nil {
					t.Fatal(err)
				}
			}
			var want strings.Builder
			want.WriteString("ab")
			for i := 1; i <= n; i++ {
				fmt.Fprintf(&want, "%d\n", i)
			}
			want.WriteString("err\n")
			small := want.Len() <= 4<<10
			waitJournal(t, filepath.Join(e.state, "journal.json"), "the job's output read", func(f *journal.File) bool {
				if len(f.Jobs) != 1 || f.Jobs[0].StdoutBytes+f.Jobs[0].StderrBytes != int64(want.Len()) {
					return false
				}
				if small { // (stderr's unpublished; stdout's, older, published when the record was taken)
					u := f.Jobs[0].OutputUnpublished
					return len(u) == 1 && u[0].Stream == "stderr" && f.Jobs[0].OutputEnd+int64(len(u[0].Data)) == int64(want.Len())
				}
				// (more than a record keeps: published when the record was
				// taken, but what came after, say stderr's line)
				un := int64(0)
				for _, u := range f.Jobs[0].OutputUnpublished {
					un += int64(len(u.Data))
				}
				return f.Jobs[0].OutputEnd >= 4<<10 && f.Jobs[0].OutputEnd+un == int64(want.Len()) && un <= 4<<10
			})
			s.kill9()
			s2 := e.start(t)
			var got strings.Builder
			var cursor, lost int64
			var info protocol.JobInfo
			for {
				r, err := s2.client.Poll(ctx, j.JobID, cursor, 0)
				if err != nil {
					t.Fatal(err)
				}
				lost += r.LostBytes
				for _, c := range r.Chunks {
					got.Write(c.Data)
				}
				cursor, info = r.Next, r.Job
				if !r.More {
					break
				}
			}
			// Its output ends past every offset the dead supervisor may
			// have published (2^30 past the journal's record), as a
			// resumed service's next run starts there: a cursor a client
			// got from it, past what the journal recorded, is still in
			// range.
			if info.Reason != protocol.ReasonSupervisorRestart || info.StdoutBytes+info.StderrBytes != int64(want.Len()) || info.OutputEnd < 1<<30 || info.OutputEnd > int64(want.Len())+1<<30 {
				t.Fatalf("job after the restart: reason %s outputEnd %d stdout %d stderr %d", info.Reason, info.OutputEnd, info.StdoutBytes, info.StderrBytes)
			}
			if r, err := s2.client.Poll(ctx, j.JobID, int64(want.Len())+1000, 0); err != nil || len(r.Chunks) != 0 || r.LostBytes != 0 {
				t.Fatalf("poll from a cursor the dead supervisor could have given: %+v, %v", r, err)
			}
			if int64(got.Len())+lost != int64(want.Len()) || !strings.HasSuffix(want.String(), got.String()) || small && lost != 0 {
				t.Fatalf("after the restart: %d bytes retained, %d reported lost, of %d printed", got.Len(), lost, want.Len())
			}
		})
	}
}

// TestForcedShutdownExitsZero: a shutdown whose time bound runs out (a job
// ignores SIGTERM, --shutdown-timeout shorter than --grace), and the fast
// shutdown of a second SIGTERM, SIGKILL what is left and exit 0 with
// nothing left behind, as documented (they exited 1: systemd's
// Restart=on-failure restarted a supervisor that had been stopped).
func TestForcedShutdownExitsZero(t *testing.T) {
	for _, how := range []string{"time bound", "second signal"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t)
			var s *sup
			if how == "time bound" {
				s = e.start(t, "--grace", "5s", "--shutdown-timeout", "1s")
			} else {
				s = e.start(t, "--grace", "30s")
			}
			ctx := ctxFor(t, 30*time.Second)
			j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: `trap '' TERM; echo up; sleep 300 & wait`})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { killGroups([]int{j.Pgid}) })
			waitOutput(t, s, j.JobID, "up")
			s.cmd.Process.Signal(syscall.SIGTERM)
			if how == "second signal" {
				waitLog(t, s, "supervisor shutting down")
				s.cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case <-s.done:
			case <-time.After(20 * time.Second):
				t.Fatal("supervisor did not exit within 20 s")
			}
			if s.exitErr != nil {
				t.Fatalf("exit: %v\n%s", s.exitErr, s.log)
			}
			if live := proctest.InGroup(j.Pgid); len(live) > 0 {
				t.Fatalf("left behind: %v", live)
			}
		})
	}
}

// TestNoZombiesAfterOrphanedGrandchildren: 200 short jobs each leave a
// grandchild that outlives its parent; the supervisor (a child subreaper)
// ends and reaps them all, with and without cgroups.
func TestNoZombiesAfterOrphanedGrandchildren(t *testing.T) {
	for _, mode := range []string{"cgroups", "no-cgroups"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			var extra []string
			if mode == "no-cgroups" {
				extra = append(extra, "--no-cgroups")
			}
			s := e.start(t, extra...)
			ctx := ctxFor(t, 60*time.Second)
			c := client.New(client.Options{ControlAddress: e.ctl, EventAddress: e.evt})
			defer c.Close()
			for i := 0; i < 200; i++ {
				j, err := c.Start(ctx, protocol.SpawnArgs{Shell: "(sleep 0.2 &) ; true", GraceMs: 100}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := j.Wait(ctx); err != nil {
					t.Fatal(err)
				}
				j.Close()
			}
			// One that left the group (setsid) and ends on its own after
			// its job (with cgroups, the job's end ends it).
			dir := t.TempDir()
			f := dir + "/pid"
			j, err := c.Start(ctx, protocol.SpawnArgs{Shell: "setsid sh -c 'echo $$ > " + f + ".tmp && mv " + f + ".tmp " + f +
				"; exec sleep 0.3' & while [ ! -e " + f + " ]; do :; done", GraceMs: 100}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			j.Close()
			escaped := 0
			pid := s.cmd.Process.Pid
			deadline := time.Now().Add(15 * time.Second)
			for {
				if escaped == 0 {
					b, _ := os.ReadFile(f)
					escaped, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				}
				// (escaped alive: not yet exited; a zombie child: not yet reaped)
				if escaped > 0 && !proctest.Alive(escaped) && len(proctest.ZombieChildren(pid)) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 15 s: escaped process %d alive %v; zombie children of the supervisor: %v",
						escaped, escaped > 0 && proctest.Alive(escaped), proctest.ZombieChildren(pid))
				}
				time.Sleep(50 * time.Millisecond) // the reaper runs every second
			}
		})
	}
}

// TestEscapeTreeWithoutCgroups: when cgroups are off, the double-forked
// and nohup'ed children of a killed job stay in its process group and die
// with it; the one that made a session of its own (setsid) outlives the
// job's end only until the supervisor (its subreaper, once its parent is
// gone) sees it, told by the job's mark, and ends it too (SIGTERM, the
// job's grace, SIGKILL).
func TestEscapeTreeWithoutCgroups(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--no-cgroups")
	ctx := ctxFor(t, 30*time.Second)
	dir := t.TempDir()
	tree := fmt.Sprintf(`setsid sh -c 'echo $$ > %[1]s/setsid; exec sleep 300' & `+
		`(sh -c 'echo $$ > %[1]s/double; exec sleep 300' &) ; `+
		`nohup sh -c 'echo $$ > %[1]s/nohup; exec sleep 300' >/dev/null 2>&1 & echo up; sleep 300`, dir)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: tree, GraceMs: 200})
	if err != nil {
		t.Fatal(err)
	}
	pids := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 3 {
		for _, name := range []string{"setsid", "double", "nohup"} {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				if p, _ := strconv.Atoi(strings.TrimSpace(string(b))); p > 0 {
					pids[name] = p
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("children did not start: %v", pids)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the children to write their pids
	}
	t.Cleanup(func() {
		for _, p := range pids {
			if proctest.Alive(p) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	if _, err := s.client.Kill(ctx, j.JobID, ""); err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Options{ControlAddress: e.ctl, EventAddress: e.evt})
	defer c.Close()
	if err := c.Follow(ctx, j.JobID, 1, func(protocol.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if proctest.Alive(pids["double"]) || proctest.Alive(pids["nohup"]) {
		t.Fatalf("group members survived: double %v nohup %v", proctest.Alive(pids["double"]), proctest.Alive(pids["nohup"]))
	}
	ticks, _ := proc.StartTicks(pids["setsid"]) // (0: already ended)
	deadline = time.Now().Add(10 * time.Second)
	for ticks != 0 && proc.Identify(pids["setsid"], ticks, proc.BootID()) == proc.Ours {
		if time.Now().After(deadline) {
			t.Fatalf("the setsid child (pid %d) outlived its job by 10 s:\n%s", pids["setsid"], s.log)
		}
		time.Sleep(20 * time.Millisecond) // the reaper's pass, once a second: no event to wait on
	}
	waitLog(t, s, "ownership escape: a process a finished job left outside its group is terminated")
}

// TestCgroupEscapeEndedByMark: with cgroups, a job that moves itself out
// of its cgroup (into the root's) and leaves a child behind there is
// ended too: the child, reparented to the supervisor (its subreaper),
// carries the job's mark, and its job has finished. (It survived for
// ever: only without cgroups were such orphans judged by their mark.)
func TestCgroupEscapeEndedByMark(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 30*time.Second)
	h, err := s.client.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Cgroups {
		t.Skipf("no cgroup per job here (%s)", h.CgroupsNote)
	}
	root := cgroup2Root(t)
	dir := t.TempDir()
	escape := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec setsid sh -c 'echo $$ > %s/pid; exec sleep 300'`, root, dir)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: escape, GraceMs: 200})
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for pid == 0 {
		if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the escaped child did not start:\n%s", s.log)
		}
		time.Sleep(20 * time.Millisecond) // waiting for the child to write its pid
	}
	ticks, _ := proc.StartTicks(pid)
	t.Cleanup(func() {
		if proc.Identify(pid, ticks, proc.BootID()) == proc.Ours {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); !strings.Contains(string(b), "0::/\n") {
		t.Fatalf("the child is not in the root cgroup: %q", b)
	}
	if _, fin, err := s.client.Wait(ctx, j.JobID, 10*time.Second); err != nil || !fin {
		t.Fatalf("the job (its main process exits at once): finished %v, %v", fin, err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for ticks != 0 && proc.Identify(pid, ticks, proc.BootID()) == proc.Ours {
		if time.Now().After(deadline) {
			t.Fatalf("the child that left its job's cgroup (pid %d) outlived its job by 10 s:\n%s", pid, s.log)
		}
		time.Sleep(20 * time.Millisecond) // the reaper's pass, once a second: no event to wait on
	}
	waitLog(t, s, "ownership escape: a process a finished job left outside its group is terminated")
}

// cgroup2Root is where the cgroup v2 hierarchy is mounted.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(line, " - cgroup2 ") {
			return f[4]
		}
	}
	t.Skip("no cgroup v2 hierarchy mounted")
	return ""
}

// TestServiceHistorySurvivesKill9: a service's crash history (last lines of
// each run) and its restart-limit fate come back after the supervisor is
// SIGKILLed; a service that was running is resumed (its orphan terminated,
// the interrupted run recorded) and can be stopped.
func TestServiceHistorySurvivesKill9(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	crash, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: `echo "boom $$"; exit 1`,
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, RestartDelayMs: 50, MaxRestarts: ptr(3)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.client.Follow(ctx, crash.JobID, 1, func(protocol.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	svc, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: `echo "up $$"; exec sleep 300`,
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{svc.Pgid}) })
	waitJournal(t, filepath.Join(e.state, "journal.json"), "both services recorded", func(f *journal.File) bool {
		var crashed, up bool
		for _, r := range f.Jobs {
			if r.JobID == crash.JobID && r.Service != nil && len(r.Service.History) == 3 && r.Reason == protocol.ReasonRestartLimit {
				crashed = true
			}
			if r.JobID == svc.JobID && r.Service != nil && r.State == "running" && strings.Contains(string(r.OutputTail), "up ") {
				up = true
			}
		}
		return crashed && up
	})
	s.kill9()

	s2 := e.start(t)
	hist, err := s2.client.History(ctx, crash.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 3 {
		t.Fatalf("history after the restart: %+v", hist)
	}
	for i, r := range hist {
		if r.Attempt != i+1 || len(r.Tail) != 1 || r.Tail[0] != fmt.Sprintf("boom %d", r.Pid) || *r.ExitCode != 1 {
			t.Fatalf("run %d: %+v", i+1, r)
		}
	}
	st, err := s2.client.Status(ctx, crash.JobID)
	if err != nil || st.Reason != protocol.ReasonRestartLimit || st.State != protocol.StateExited {
		t.Fatalf("crashed service after the restart: %+v %v", st, err)
	}
	// The running service: orphan terminated, interrupted run recorded,
	// resumed as attempt 2.
	st, err = s2.client.Status(ctx, svc.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != protocol.StateRunning || st.Attempt != 2 || st.Pid == svc.Pid {
		t.Fatalf("running service after the restart: %+v", st)
	}
	if proctest.Alive(svc.Pid) {
		t.Fatalf("the previous run's process %d is still alive", svc.Pid)
	}
	hist, err = s2.client.History(ctx, svc.JobID)
	if err != nil || len(hist) != 1 || hist[0].Reason != protocol.ReasonSupervisorRestart || !hist[0].Restarted ||
		len(hist[0].Tail) == 0 || hist[0].Tail[0] != fmt.Sprintf("up %d", svc.Pid) {
		t.Fatalf("interrupted run: %+v %v", hist, err)
	}
	t.Cleanup(func() { killGroups([]int{st.Pgid}) })
	if _, err := s2.client.Stop(ctx, svc.JobID); err != nil {
		t.Fatal(err)
	}
	if err := s2.client.Follow(ctx, svc.JobID, st.LastSeq, func(protocol.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if st, _ := s2.client.Status(ctx, svc.JobID); st.Reason != protocol.ReasonStopped {
		t.Fatalf("after stop: %+v", st)
	}
}

// TestExecctlWaitAcrossRestart: `execctl wait` on a job whose supervisor
// is SIGKILLed and started again asks the new one, and exits with the fate
// it recorded (not with "no supervisor"), whether its wait was held by the
// first supervisor or not yet sent when it died.
func TestExecctlWaitAcrossRestart(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "exec sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	// (a job the dead supervisor never journaled is unknown to the next)
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the job running, with its fingerprint", func(f *journal.File) bool {
		for _, r := range f.Jobs {
			if r.JobID == j.JobID && r.State == "running" && r.StartTicks != 0 {
				return true
			}
		}
		return false
	})
	var stderr proctest.Buffer
	wait := exec.CommandContext(ctx, execctlBinary, "--control", e.ctl, "--event", e.evt, "wait", j.JobID)
	wait.Stderr = &stderr
	if err := wait.Start(); err != nil {
		t.Fatal(err)
	}
	s.kill9()
	s2 := e.start(t)
	err = wait.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 3 || !strings.Contains(stderr.String(), string(protocol.ReasonSupervisorRestart)) {
		t.Fatalf("execctl wait across the restart: %v, stderr %q; want the job's recorded fate", err, stderr.String())
	}
	info, err := s2.client.Status(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{info.Pgid}) })
}

// sameOutput reports whether a and b are the same output event: kind,
// offset and bytes.
func sameOutput(a, b protocol.Event) bool {
	if a.Kind != b.Kind || (a.Kind != protocol.KindStdout && a.Kind != protocol.KindStderr) {
		return false
	}
	oa, erra := a.Output()
	ob, errb := b.Output()
	return erra == nil && errb == nil && oa.Offset == ob.Offset && bytes.Equal(oa.Data, ob.Data)
}

// TestKill9KeepsSeqsOfResumedService: a service prints faster than the
// journal is written (it is written every 30 s here, and output does not
// mark it dirty); the supervisor is SIGKILLed and restarted. The resumed
// service's events (the interrupted run's end, the next run) are numbered
// past every seq the previous supervisor may have published: a client
// that saw seq N never gets a different event under a seq it already has.
// (They reused the journal's stale seqs: a poll-mode follower dropped them
// as duplicates.) Its output offsets are past every offset the previous
// supervisor may have published too. (Output on disk, by default for
// services, would give back what the dead supervisor read past the
// journal: here the journal alone is what a successor numbers from.)
func TestKill9KeepsSeqsOfResumedService(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--journal-flush-interval", "30s", "--output-disk", "none")
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{
		Shell:   "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.02; done",
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways},
	})
	if err != nil {
		t.Fatal(err)
	}
	jpath := filepath.Join(e.state, "journal.json")
	var journaled uint64
	waitJournal(t, jpath, "the running service", func(f *journal.File) bool {
		for _, r := range f.Jobs {
			if r.JobID == j.JobID && r.State == "running" {
				journaled = r.LastSeq
				return true
			}
		}
		return false
	})
	var seen uint64
	var seenEnd int64
	deadline := time.Now().Add(20 * time.Second)
	for seen < journaled+20 { // events the journal does not know of
		st, err := s.client.Status(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		seen, seenEnd = st.LastSeq, st.OutputEnd
		if time.Now().After(deadline) {
			t.Fatalf("the service published up to seq %d (journal: %d)", seen, journaled)
		}
		time.Sleep(20 * time.Millisecond) // polling the job's progress
	}
	// What the previous supervisor published, by seq (its ring keeps it
	// all): a seq it used may come again only for the same output (a
	// record newer than the journal, in its intents, keeps its tail).
	before, err := s.client.Subscribe(ctx, j.JobID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if before.More {
		t.Fatalf("the previous supervisor's events did not fit one subscribe reply (%d)", len(before.Events))
	}
	published := map[uint64]protocol.Event{}
	for _, ev := range before.Events {
		published[ev.Seq] = ev
	}
	seen = max(seen, before.Job.LastSeq)
	s.kill9()
	pgid := j.Pgid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	s2 := e.start(t, "--journal-flush-interval", "30s", "--output-disk", "none")
	var res protocol.SubscribeResult
	deadline = time.Now().Add(20 * time.Second)
	for {
		res, err = s2.client.Subscribe(ctx, j.JobID, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(res.Events, func(ev protocol.Event) bool {
			return ev.Kind == protocol.KindStarted && ev.Seq > journaled
		}) {
			break // the resumed run started (it may have printed since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service was not resumed: %d events", len(res.Events))
		}
		time.Sleep(20 * time.Millisecond) // polling for the resumed run
	}
	for _, ev := range res.Events {
		if ev.Seq <= journaled || ev.Seq > seen {
			continue
		}
		if prev, ok := published[ev.Seq]; !ok || !sameOutput(prev, ev) {
			t.Errorf("after the restart, seq %d (%s) reuses a seq the previous supervisor published for other output (journal %d, seen %d)", ev.Seq, ev.Kind, journaled, seen)
		}
	}
	// Output offsets likewise: a poll cursor the previous supervisor
	// handed out reads the resumed run's output from its first line (it
	// wrote from the journal's output end again: the cursor was "past
	// the end", then skipped the run's first lines).
	var got []byte
	var p protocol.PollResult
	for deadline = time.Now().Add(20 * time.Second); len(got) < len("line0\n"); {
		p, err = s2.client.Poll(ctx, j.JobID, seenEnd, 0)
		if err != nil {
			t.Fatalf("poll from offset %d, the end the previous supervisor reported: %v", seenEnd, err)
		}
		got = nil
		for _, c := range p.Chunks {
			got = append(got, c.Data...)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output of the resumed run from offset %d: %q", seenEnd, got)
		}
		time.Sleep(20 * time.Millisecond) // polling for the resumed run's output
	}
	if !bytes.HasPrefix(got, []byte("line0\n")) {
		t.Errorf("from the previous supervisor's last offset %d: %q, want the resumed run's output from its first line", seenEnd, got)
	}
	// What the dead supervisor read past its last journal write is lost,
	// and the poll says so (it said nothing was lost).
	if !p.Truncated || !p.CrashGap {
		t.Errorf("from the previous supervisor's last offset %d: truncated %v, crashGap %v; want a crash gap reported", seenEnd, p.Truncated, p.CrashGap)
	}
	// Polled from the start, the output up to the journal's end comes
	// first, then a poll reports the gap before the resumed run's output.
	gap := false
	for cursor := int64(0); ; {
		r, err := s2.client.Poll(ctx, j.JobID, cursor, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.CrashGap {
			gap = true
			if len(r.Chunks) == 0 || !bytes.HasPrefix(r.Chunks[0].Data, []byte("line0\n")) {
				t.Errorf("the poll reporting the gap (from %d) does not start with the resumed run's first line", cursor)
			}
		}
		if !r.More {
			break
		}
		cursor = r.Next
	}
	if !gap {
		t.Error("polled from 0, no poll reported the crash gap")
	}
	if _, err := s2.client.Stop(ctx, j.JobID); err != nil {
		t.Fatal(err)
	}
}

// TestExecctlFollowAcrossRestart: execctl spawn --follow goes on across a
// supervisor that is down for a while (SIGKILL, back 1.5 s later) and ends
// with the job's recorded fate, not "no supervisor answering": its client
// gives up on a connection at once, and following is resumed. (It exited 3
// unless the supervisor was back within about a second.)
func TestExecctlFollowAcrossRestart(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	var stdout, stderr proctest.Buffer
	follow := exec.CommandContext(ctx, execctlBinary, "--control", e.ctl, "--event", e.evt,
		"spawn", "--follow", "--shell", "echo started; exec sleep 300")
	follow.Stdout, follow.Stderr = &stdout, &stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stdout.String(), "started") {
		if time.Now().After(deadline) {
			t.Fatalf("no output from the followed job: %q %q", stdout.String(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the follower's output
	}
	jobs, err := s.client.ListJobs(ctx, protocol.ListJobsArgs{})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("jobs %v %v", jobs, err)
	}
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the job running, with its fingerprint", func(f *journal.File) bool {
		return len(f.Jobs) == 1 && f.Jobs[0].State == "running" && f.Jobs[0].StartTicks != 0
	})
	t.Cleanup(func() { killGroups([]int{jobs[0].Pgid}) })
	s.kill9()
	<-time.After(1500 * time.Millisecond) // the outage (part of the scenario, not a wait for anything)
	e.start(t)
	err = follow.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 3 || !strings.Contains(stderr.String(), string(protocol.ReasonSupervisorRestart)) {
		t.Fatalf("execctl --follow across the restart: %v, stderr %q; want the job's recorded fate", err, stderr.String())
	}
	if strings.Count(stdout.String(), "started") != 1 {
		t.Fatalf("output %q: want it once", stdout.String())
	}
}

// TestExecctlWriteLargeStdin: execctl write JOB - sends standard input of
// any size, in writes of at most the protocol's 256 KiB (it refused more
// than 256 KiB), then --eof.
func TestExecctlWriteLargeStdin(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 30*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"wc", "-c"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	w := exec.CommandContext(ctx, execctlBinary, "--control", e.ctl, "--event", e.evt, "write", "--eof", j.JobID, "-")
	w.Stdin = bytes.NewReader(bytes.Repeat([]byte("x"), 600<<10))
	if out, err := w.CombinedOutput(); err != nil {
		t.Fatalf("execctl write: %v\n%s", err, out)
	}
	info, done, err := s.client.Wait(ctx, j.JobID, 10*time.Second)
	if err != nil || !done {
		t.Fatalf("wait: %v", err)
	}
	res, err := s.client.Poll(ctx, j.JobID, 0, 0)
	if err != nil || len(res.Chunks) == 0 || strings.TrimSpace(string(res.Chunks[0].Data)) != fmt.Sprint(600<<10) {
		t.Fatalf("the job counted %+v (%v); exit %v", res.Chunks, err, info.ExitCode)
	}
}

// TestDrainResumesServices: with --shutdown=wait, a service run that ends
// during the drain (its policy would restart it) ends supervision as a
// shutdown does, so the next supervisor resumes it (it kept the run's own
// reason, exit, and stayed down after the restart).
func TestDrainResumesServices(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--shutdown", "wait", "--shutdown-timeout", "10s")
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "echo a; sleep 0.3; exit 1", Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	s2 := e.start(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := s2.client.Status(ctx, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != protocol.StateExited && info.Attempt >= 2 {
			break // resumed
		}
		if time.Now().After(deadline) {
			t.Fatalf("not resumed: %s %s attempt %d", info.State, info.Reason, info.Attempt)
		}
		time.Sleep(20 * time.Millisecond) // polling the job's state
	}
	// The run that ended during the drain is in the history as restarted
	// (it said restarted: false though it was resumed).
	hist, err := s2.client.History(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) == 0 || hist[0].Attempt != 1 || !hist[0].Restarted {
		t.Fatalf("history %+v: want the first run, restarted", hist)
	}
	if _, err := s2.client.Stop(ctx, j.JobID); err != nil {
		t.Fatal(err)
	}
}

// TestInterruptedRunHistoryTail: after a SIGKILL of the supervisor, the
// history record of a service's interrupted run has that run's output
// only (it had the whole job's tail: an earlier run's lines).
func TestInterruptedRunHistoryTail(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--journal-flush-interval", "100ms")
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "echo run-$$; exec sleep 300", Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	waitOut := func(n int) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			res, err := s.client.Poll(ctx, j.JobID, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var out string
			for _, c := range res.Chunks {
				out += string(c.Data)
			}
			if strings.Count(out, "run-") >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("output %q", out)
			}
			time.Sleep(20 * time.Millisecond) // polling the job's output
		}
	}
	waitOut(1)
	if _, err := s.client.Restart(ctx, j.JobID); err != nil {
		t.Fatal(err)
	}
	waitOut(2)
	info, err := s.client.Status(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the second run with its output", func(f *journal.File) bool {
		return len(f.Jobs) == 1 && f.Jobs[0].Service != nil && f.Jobs[0].Service.Attempt == 2 && f.Jobs[0].OutputEnd == info.OutputEnd && f.Jobs[0].StartTicks != 0
	})
	t.Cleanup(func() { killGroups([]int{info.Pgid}) })
	s.kill9()
	s2 := e.start(t, "--resume-services=false")
	hist, err := s2.client.History(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	last := hist[len(hist)-1]
	want := fmt.Sprintf("run-%d", info.Pid)
	if last.Reason != protocol.ReasonSupervisorRestart || len(last.Tail) != 1 || last.Tail[0] != want {
		t.Fatalf("interrupted run: %s, tail %q; want only %q", last.Reason, last.Tail, want)
	}
}

// TestRestartKeepsServiceEvents: a service in its second run, the
// supervisor restarted (SIGTERM): every event the new supervisor returns
// under a seq the old one published is that event (kind, attempt,
// payload). The first run's job.started was rebuilt from the current
// run's pid, and the restored output had lost its attempt.
func TestRestartKeepsServiceEvents(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "echo run-$$; exec sleep 300", Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	printed := func() int {
		res, err := s.client.Poll(ctx, j.JobID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Chunks)
	}
	for deadline := time.Now().Add(20 * time.Second); printed() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first run printed nothing")
		}
		time.Sleep(10 * time.Millisecond) // polling the first run's output
	}
	if _, err := s.client.Restart(ctx, j.JobID); err != nil {
		t.Fatal(err)
	}
	var before protocol.SubscribeResult
	deadline := time.Now().Add(20 * time.Second)
	for {
		if before, err = s.client.Subscribe(ctx, j.JobID, 1, 0); err != nil {
			t.Fatal(err)
		}
		outs := 0
		for _, ev := range before.Events {
			if ev.Kind == protocol.KindStdout {
				outs++
			}
		}
		if outs == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %d", len(before.Events))
		}
		time.Sleep(20 * time.Millisecond) // polling the service's second run
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	s2 := e.start(t, "--resume-services=false")
	after, err := s2.client.Subscribe(ctx, j.JobID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	old := map[uint64]protocol.Event{}
	for _, ev := range before.Events {
		old[ev.Seq] = ev
	}
	same := 0
	for _, ev := range after.Events {
		o, ok := old[ev.Seq]
		if !ok {
			continue
		}
		if o.Kind != ev.Kind || o.Attempt != ev.Attempt || !bytes.Equal(o.Payload, ev.Payload) {
			var op, np map[string]any
			_ = o.DecodePayload(&op)
			_ = ev.DecodePayload(&np)
			t.Errorf("seq %d: was %s attempt %d %v, now %s attempt %d %v", ev.Seq, o.Kind, o.Attempt, op, ev.Kind, ev.Attempt, np)
		}
		same++
	}
	if same == 0 {
		t.Fatal("no event kept its seq")
	}
}

// waitOutput waits until job id has printed want (polling its output).
func waitOutput(t *testing.T, s *sup, id, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := s.client.Poll(ctx, id, 0, 0)
		cancel()
		var out strings.Builder
		for _, c := range r.Chunks {
			out.Write(c.Data)
		}
		if err == nil && strings.Contains(out.String(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never printed %q (%v): %q", id, want, err, out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the job's output
	}
}

// waitLog waits until the supervisor's log holds want.
func waitLog(t *testing.T, s *sup, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", want, s.log)
		}
		time.Sleep(10 * time.Millisecond) // polling the log
	}
}

// spawnTreeInCgroup spawns shell on s, skipping the test without a
// cgroup per job, and waits until the job's cgroup holds n processes:
// the job and them (killed when the test ends).
func spawnTreeInCgroup(t *testing.T, s *sup, shell string, n int) (protocol.JobInfo, []int) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	if h, err := s.client.Health(ctx); err != nil || !h.Cgroups {
		t.Skipf("no cgroup per job here (%v %s)", err, h.CgroupsNote)
	}
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: shell})
	if err != nil {
		t.Fatal(err)
	}
	var members []int
	deadline := time.Now().Add(10 * time.Second)
	for members = jobCgroupProcs(s, j.JobID); len(members) < n; members = jobCgroupProcs(s, j.JobID) {
		if time.Now().After(deadline) {
			t.Fatalf("cgroup members: %v", members)
		}
		time.Sleep(20 * time.Millisecond) // the shell starts its children
	}
	t.Cleanup(func() {
		for _, p := range members {
			if proctest.Alive(p) {
				syscall.Kill(p, syscall.SIGKILL)
			}
		}
	})
	return j, members
}

// TestJournalFailureHoldsOutput: with the journal unwritable after a job
// was recorded (as on a full disk), the job is stopped at its reserve
// (status says outputHeld, the log says why) instead of publishing seqs
// and offsets a successor would number over. A crash while it is held,
// with the disk keeping the record from before the failure, is recovered
// past every seq published. (That a write which lands lets the job go on
// is TestOutputHeldAtReserveGate's, in internal/jobs: here each hold
// costs 768 MiB of output through a -race build.)
func TestJournalFailureHoldsOutput(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 90*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	pgid := j.Pgid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	jpath := filepath.Join(e.state, "journal.json")
	waitJournal(t, jpath, "the running job", func(f *journal.File) bool {
		return slices.ContainsFunc(f.Jobs, func(r journal.Record) bool { return r.JobID == j.JobID && r.State == "running" })
	})
	old := failJournalWrites(t, jpath)
	var st protocol.JobInfo
	for deadline := time.Now().Add(60 * time.Second); !st.OutputHeld; {
		if st, err = s.client.Status(ctx, j.JobID); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("not held after 60 s: seq %d, %d bytes", st.LastSeq, st.OutputEnd)
		}
		time.Sleep(20 * time.Millisecond) // polling the job's progress
	}
	waitLog(t, s, "job output held")
	s.kill9()
	restoreJournal(t, jpath, old)
	s2 := e.start(t)
	res, err := s2.client.Subscribe(ctx, j.JobID, st.LastSeq, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range res.Events {
		if ev.Kind.Terminal() {
			if ev.Seq <= st.LastSeq {
				t.Fatalf("the terminal event has seq %d, already published before the crash (up to %d)", ev.Seq, st.LastSeq)
			}
			return
		}
	}
	t.Fatalf("no terminal event past seq %d after the restart: %+v", st.LastSeq, res.Events)
}

// TestLogReaderGone: a supervisor whose stderr is a pipe whose reader went
// away (a log collector that died, `| head`) keeps running and owning its
// jobs: it died of SIGPIPE at its next log line, leaving a job tree
// running with no owner (found by an operator audit). Its jobs still get
// SIGPIPE's default disposition.
func TestLogReaderGone(t *testing.T) {
	e := newEnv(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--control", e.ctl, "--event", e.evt, "--state-dir", e.state, "--metrics-addr", "", "--log-level", "debug", "--grace", "500ms")
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Signal(syscall.SIGTERM)
			<-done
		}
	})
	// Read until it says it started, then go away.
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("supervisor log ended before it started: %v", err)
		}
		if strings.Contains(line, "supervisor started") {
			break
		}
	}
	r.Close()
	c := client.New(client.Options{ControlAddress: e.ctl, EventAddress: e.evt, RequestTimeout: 10 * time.Second, MaxReconnectAttempts: 1})
	defer c.Close()
	ctx := ctxFor(t, 30*time.Second)
	tree, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 300 & sleep 300 & wait"}) // (logged: EPIPE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{tree.Pgid}) })
	j, finished, err := c.SpawnWait(ctx, protocol.SpawnArgs{Shell: "grep SigIgn /proc/self/status"}, 10*time.Second)
	if err != nil || !finished {
		t.Fatalf("spawn after the log reader went: %v (finished %v)", err, finished)
	}
	res, err := c.Poll(ctx, j.JobID, 0, 0)
	if err != nil || len(res.Chunks) == 0 {
		t.Fatalf("poll: %v", err)
	}
	ign, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(res.Chunks[0].Data), "SigIgn:")), 16, 64)
	if err != nil || ign&(1<<(syscall.SIGPIPE-1)) != 0 {
		t.Fatalf("a job's ignored signals: %q (%v): SIGPIPE must keep its default", res.Chunks[0].Data, err)
	}
	if _, err := c.Kill(ctx, tree.JobID, ""); err != nil {
		t.Fatal(err)
	}
	end, fin, err := c.Wait(ctx, tree.JobID, 10*time.Second)
	if err != nil || !fin || end.Reason != protocol.ReasonManualCancel {
		t.Fatalf("kill of the tree: %+v, %v, %v", end, fin, err)
	}
	if pids := proctest.InGroup(tree.Pgid); len(pids) > 0 {
		t.Fatalf("processes of the killed tree left: %v", pids)
	}
	select {
	case err := <-done:
		t.Fatalf("the supervisor exited: %v", err)
	default:
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
}

// spawnStubborn spawns, through s, a job whose processes ignore SIGTERM
// (its kill waits for a 60 s grace) with args (its shell and grace set
// here), and returns it once it printed "up"; its group is killed when
// the test ends.
func spawnStubborn(t *testing.T, s *sup, args protocol.SpawnArgs) protocol.JobInfo {
	t.Helper()
	args.Shell, args.GraceMs = `trap '' TERM; echo up; sleep 300 & wait`, 60_000
	j, err := s.client.Spawn(ctxFor(t, 10*time.Second), args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	waitOutput(t, s, j.JobID, "up")
	return j
}

// TestAckedJobControlSurvivesCrash: a kill, stop or start the supervisor
// answered is in the journal when the answer goes, however soon the
// supervisor dies after it. Replies went before the write (batched, up to
// 100 ms later): a kill -9 right after them brought a stopped service
// back and recorded a killed job as supervisor-restart (found by a chaos
// audit: 4 of 8 stops, 3 of 3 kills).
func TestAckedJobControlSurvivesCrash(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	always := &protocol.RestartPolicy{Policy: protocol.RestartAlways}
	killed := spawnStubborn(t, s, protocol.SpawnArgs{})
	stopped := spawnStubborn(t, s, protocol.SpawnArgs{Restart: always})
	// A service that ran and finished, started again below.
	onFailure := &protocol.RestartPolicy{Policy: protocol.RestartOnFailure}
	finished, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "exit 0", Restart: onFailure})
	if err != nil {
		t.Fatal(err)
	}
	if _, fin, err := s.client.Wait(ctx, finished.JobID, 10*time.Second); err != nil || !fin {
		t.Fatalf("wait: %v %v", fin, err)
	}
	// A change just before: the journal's next write is a pause away.
	if _, err := s.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Kill(ctx, killed.JobID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Stop(ctx, stopped.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.StartService(ctx, finished.JobID); err != nil {
		t.Fatal(err)
	}
	s.kill9()
	s2 := e.start(t)
	for id, reason := range map[string]protocol.Reason{killed.JobID: protocol.ReasonManualCancel, stopped.JobID: protocol.ReasonStopped} {
		info, err := s2.client.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != protocol.StateExited || info.Reason != reason || info.Attempt > 1 {
			t.Errorf("job %s after the crash: state %s reason %s attempt %d, want exited %s (not resumed)", id, info.State, info.Reason, info.Attempt, reason)
		}
	}
	// The service started again: its second run is known after the crash.
	if info, err := s2.client.Status(ctx, finished.JobID); err != nil || info.Attempt < 2 {
		t.Errorf("the service started again before the crash: attempt %d (%v), want its second run known", info.Attempt, err)
	}
	for _, j := range []protocol.JobInfo{killed, stopped} {
		if pids := proctest.InGroup(j.Pgid); len(pids) > 0 {
			t.Errorf("job %s: processes left %v", j.JobID, pids)
		}
	}
}

// TestKillDurableWhileJournalFails: while every journal write fails, a
// kill is still answered at once and durable: its record goes to the
// journal's intents, synced, and the supervisor killed -9 right after the
// reply is followed by one that knows the job was cancelled (the reply
// waited for a rewrite of the whole journal before).
func TestKillDurableWhileJournalFails(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	a := spawnStubborn(t, s, protocol.SpawnArgs{})
	jpath := filepath.Join(e.state, "journal.json")
	waitJournal(t, jpath, "the running job", func(f *journal.File) bool { return len(f.Jobs) == 1 })
	breakJournal(t, jpath)
	start := time.Now()
	if _, err := s.client.Kill(ctx, a.JobID, ""); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= durableWait {
		t.Errorf("kill answered after %s", d)
	}
	s.kill9()
	if strings.Contains(s.log.String(), "reply sent before the journal recorded its change") {
		t.Errorf("the kill went before it was recorded:\n%s", s.log)
	}
	s2 := e.start(t)
	info, err := s2.client.Status(ctx, a.JobID)
	if err != nil || info.State != protocol.StateExited || info.Reason != protocol.ReasonManualCancel {
		t.Fatalf("killed job after the crash: %+v, %v; want exited manual-cancel", info, err)
	}
	if pids := proctest.InGroup(a.Pgid); len(pids) > 0 {
		t.Errorf("processes left %v", pids)
	}
}

// TestKillReplyWhileJournalFails: while neither journal writes nor its
// intents can be written (the intents file immutable), a kill is answered
// once the journal write it then waits for failed (not after the 3 s
// bound, nor never), and the log says, once for two kills, that the
// answer went before its change was journaled (it went silently).
func TestKillReplyWhileJournalFails(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	a := spawnStubborn(t, s, protocol.SpawnArgs{})
	b := spawnStubborn(t, s, protocol.SpawnArgs{})
	jpath := filepath.Join(e.state, "journal.json")
	waitJournal(t, jpath, "the running jobs", func(f *journal.File) bool { return len(f.Jobs) == 2 })
	ipath := journal.IntentsPath(jpath)
	if out, err := exec.Command("chattr", "+i", ipath).CombinedOutput(); err != nil {
		t.Skipf("chattr +i %s: %v %s (needs root and a filesystem with attributes)", ipath, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("chattr", "-i", ipath).Run() })
	breakJournal(t, jpath)
	for _, j := range []protocol.JobInfo{a, b} {
		start := time.Now()
		if _, err := s.client.Kill(ctx, j.JobID, ""); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d >= durableWait {
			t.Errorf("kill answered after %s: it waited out the bound, not the failed write", d)
		}
	}
	waitLog(t, s, "reply sent before the journal recorded its change")
	if n := strings.Count(s.log.String(), "reply sent before the journal recorded its change"); n != 1 {
		t.Errorf("logged %d times for two kills, want once:\n%s", n, s.log)
	}
	for _, j := range []protocol.JobInfo{a, b} {
		if _, err := s.client.Kill(ctx, j.JobID, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
	}
}

// breakJournal makes every later write of the journal at jpath fail: a
// non-empty directory cannot be renamed over.
func breakJournal(t *testing.T, jpath string) {
	t.Helper()
	if err := os.Remove(jpath); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(jpath, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
}

// durableWait is the server's bound on a reply's wait for the journal
// (durableWaitMax).
const durableWait = 3 * time.Second

// TestNotifySocketsAfterCrash: the notify sockets a crashed supervisor's
// jobs had are removed by the next one (each crash left one per notify
// job, and a resumed service binds a new name: found by a churn audit).
func TestNotifySocketsAfterCrash(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	svc, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "echo up; exec sleep 300", Notify: true, Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "echo up; exec sleep 300", Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{svc.Pgid, one.Pgid}) })
	waitOutput(t, s, svc.JobID, "up")
	waitOutput(t, s, one.JobID, "up")
	sockets := func() []string {
		ents, _ := os.ReadDir(filepath.Join(e.state, "notify"))
		var names []string
		for _, en := range ents {
			names = append(names, en.Name())
		}
		return names
	}
	if n := len(sockets()); n != 2 {
		t.Fatalf("notify sockets while two notify jobs run: %v", sockets())
	}
	s.kill9()
	s2 := e.start(t)
	waitRunsAgain(t, s2, svc.JobID, "the service was not resumed")
	if names := sockets(); len(names) != 1 {
		t.Errorf("notify sockets after the restart: %v, want the resumed service's only", names)
	}
	if _, err := s2.client.Stop(ctx, svc.JobID); err != nil {
		t.Fatal(err)
	}
}

// TestCrashWhileClearingGroup: a job whose process had exited while the
// rest of its group was being terminated (what it left running ignores
// SIGTERM: the grace runs) when the supervisor died ends, after the
// restart, with its process's exit code, and nothing of it is left. It
// ended as supervisor-restart, its exit code lost though the supervisor
// knew it (found by a chaos audit).
func TestCrashWhileClearingGroup(t *testing.T) {
	// (without cgroups, the group's members are found at once for the
	// journal, which proves them the job's to the next supervisor: the
	// background sleep was left running)
	for _, mode := range []string{"cgroups", "no-cgroups"} {
		t.Run(mode, func(t *testing.T) { crashWhileClearingGroup(t, mode == "no-cgroups") })
	}
}

func crashWhileClearingGroup(t *testing.T, noCgroups bool) {
	e := newEnv(t)
	var flags []string
	if noCgroups {
		flags = append(flags, "--no-cgroups")
	}
	s := e.start(t, flags...)
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: `trap '' TERM; sleep 300 & echo bye; exit 3`, GraceMs: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the leader's exit", func(f *journal.File) bool {
		for _, r := range f.Jobs {
			if r.JobID == j.JobID && r.LeaderExit != nil && r.LeaderExit.ExitCode != nil && *r.LeaderExit.ExitCode == 3 {
				return true
			}
		}
		return false
	})
	s.kill9()
	s2 := e.start(t, flags...)
	info, err := s2.client.Status(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != protocol.StateExited || info.Reason != protocol.ReasonExit || info.ExitCode == nil || *info.ExitCode != 3 {
		t.Errorf("after the crash: state %s reason %s exit code %v, want exited exit 3", info.State, info.Reason, info.ExitCode)
	}
	if pids := proctest.InGroup(j.Pgid); len(pids) > 0 {
		t.Errorf("processes of the job left: %v", pids)
	}
	// An unknown job, after a crash: the answer says a job spawned just
	// before it may be in no record (it blamed retention only).
	if _, err := s2.client.Status(ctx, "j-00000000000000aa"); protocol.CodeOf(err) != protocol.CodeNotFound || !strings.Contains(err.Error(), "crashed") {
		t.Errorf("status of an unknown job after a crash: %v", err)
	}
}

// TestCrashDuringKillGrace: a job whose kill was under way (its grace
// period running) when the supervisor died ends, after the restart, as it
// was being ended (manual-cancel; a service's stop: stopped) with its
// processes gone, and a service that was being stopped or killed stays
// down. A service was resumed (a stopped service came back, attempt 2)
// and a killed job recorded supervisor-restart (found by an operator
// audit). A service whose run was being ended for a restart goes on.
func TestCrashDuringKillGrace(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--journal-flush-interval", "100ms")
	ctx := ctxFor(t, 60*time.Second)
	always := &protocol.RestartPolicy{Policy: protocol.RestartAlways}
	spawn := func(args protocol.SpawnArgs) protocol.JobInfo { t.Helper(); return spawnStubborn(t, s, args) }
	killed := spawn(protocol.SpawnArgs{})
	stopped := spawn(protocol.SpawnArgs{Restart: always})
	cancelled := spawn(protocol.SpawnArgs{Restart: always})
	restarting := spawn(protocol.SpawnArgs{Restart: always})
	restartThenStop := spawn(protocol.SpawnArgs{Restart: always})
	if _, err := s.client.Restart(ctx, restartThenStop.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Stop(ctx, restartThenStop.JobID); err != nil { // (the stop wins, as it does live)
		t.Fatal(err)
	}
	if _, err := s.client.Kill(ctx, killed.JobID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Stop(ctx, stopped.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Kill(ctx, cancelled.JobID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Restart(ctx, restarting.JobID); err != nil {
		t.Fatal(err)
	}
	want := map[string]protocol.Reason{killed.JobID: "manual-cancel", stopped.JobID: "stopped", cancelled.JobID: "manual-cancel", restarting.JobID: "manual-restart", restartThenStop.JobID: "stopped"}
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the pending ends", func(f *journal.File) bool {
		n := 0
		for _, r := range f.Jobs {
			if w, ok := want[r.JobID]; ok && r.PendingEnd == w {
				n++
			}
		}
		return n == len(want)
	})
	s.kill9()
	s2 := e.start(t)
	for id, reason := range map[string]protocol.Reason{killed.JobID: protocol.ReasonManualCancel, stopped.JobID: protocol.ReasonStopped, cancelled.JobID: protocol.ReasonManualCancel, restartThenStop.JobID: protocol.ReasonStopped} {
		info, err := s2.client.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != protocol.StateExited || info.Reason != reason || info.Attempt > 1 {
			t.Errorf("job %s after the crash: state %s reason %s attempt %d, want exited %s (not resumed)", id, info.State, info.Reason, info.Attempt, reason)
		}
	}
	for _, j := range []protocol.JobInfo{killed, stopped, cancelled, restartThenStop} {
		if pids := proctest.InGroup(j.Pgid); len(pids) > 0 {
			t.Errorf("job %s: processes left %v", j.JobID, pids)
		}
	}
	waitRunsAgain(t, s2, restarting.JobID, "the service being restarted did not run again after the crash")
}

// waitRunsAgain waits until service id runs a second run or later on s
// (resumed after a crash), whose group is killed when the test ends;
// failing says what.
func waitRunsAgain(t *testing.T, s *sup, id, what string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	for deadline := time.Now().Add(20 * time.Second); ; {
		info, err := s.client.Status(ctx, id)
		if err == nil && info.State == protocol.StateRunning && info.Attempt >= 2 {
			t.Cleanup(func() { killGroups([]int{info.Pgid}) })
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v, %v", what, info, err)
		}
		time.Sleep(20 * time.Millisecond) // (polling status: no event to wait on across the restart)
	}
}

// TestSpawnJustBeforeCrash: a job spawned right before the supervisor
// dies, before any journal write records it, is known to the next run
// through the journal's intents: it ends as supervisor-restart and the
// processes it left (a shell tree) are terminated, with cgroups and
// without (without intents it was not-found, and without cgroups its
// processes ran on). Journal writes are made to fail before the spawn
// (as a full disk would), so that no write can land between the spawn
// and the crash.
func TestSpawnJustBeforeCrash(t *testing.T) { bothCgroupModes(t, spawnJustBeforeCrash) }

func spawnJustBeforeCrash(t *testing.T, noCgroups bool, flags []string) {
	e := newEnv(t)
	s := e.start(t, flags...)
	ctx := ctxFor(t, 60*time.Second)
	jpath := filepath.Join(e.state, "journal.json")
	before := readJournal(t, jpath)
	if before.IntentsGeneration == "" {
		t.Fatalf("the journal names no intents generation")
	}
	old := failJournalWrites(t, jpath)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 300 & sleep 300 & wait", Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	if pids := proctest.InGroup(j.Pgid); len(pids) < 2 {
		// (the shell starts its sleeps at once; the check below needs them)
		waitGroupSize(t, j.Pgid, 3)
	}
	s.kill9()
	restoreJournal(t, jpath, old)
	s2 := e.start(t, flags...)
	info, err := s2.client.Status(ctx, j.JobID)
	if err != nil {
		t.Fatalf("the job spawned just before the crash: %v", err)
	}
	if info.State != protocol.StateExited || info.Reason != protocol.ReasonSupervisorRestart || info.Pid != j.Pid || info.Labels["k"] != "v" {
		t.Errorf("after the crash: state %s reason %s pid %d labels %v, want exited supervisor-restart pid %d labels k=v", info.State, info.Reason, info.Pid, info.Labels, j.Pid)
	}
	if !strings.Contains(info.Error, "terminated") {
		t.Errorf("after the crash: error %q, want the orphan found and terminated", info.Error)
	}
	if pids := proctest.InGroup(j.Pgid); len(pids) > 0 {
		t.Errorf("processes of the job left: %v", pids)
	}
	waitLog(t, s2, "journal intents: job starts and changes the journal had not recorded yet")
	// The next journal write covers the intent: a third run does not
	// reconcile the job again.
	waitJournal(t, jpath, "the recovered job", func(f *journal.File) bool {
		return f.InstanceID != before.InstanceID && slices.ContainsFunc(f.Jobs, func(r journal.Record) bool { return r.JobID == j.JobID && r.State == "exited" })
	})
	s2.kill9()
	s3 := e.start(t, flags...)
	if info, err := s3.client.Status(ctx, j.JobID); err != nil || info.Reason != protocol.ReasonSupervisorRestart || info.Error == "" {
		t.Errorf("third run: %+v, %v", info, err)
	}
	if strings.Contains(s3.log.String(), "journal intents: job starts") {
		t.Errorf("the third run took covered intents for new ones:\n%s", s3.log)
	}
}

// bothCgroupModes runs f as a subtest with a cgroup per job and without
// (flags: the supervisor's for the mode).
func bothCgroupModes(t *testing.T, f func(t *testing.T, noCgroups bool, flags []string)) {
	for _, noCgroups := range []bool{false, true} {
		name, flags := "cgroups", []string(nil)
		if noCgroups {
			name, flags = "no-cgroups", []string{"--no-cgroups"}
		}
		t.Run(name, func(t *testing.T) { f(t, noCgroups, flags) })
	}
}

// failJournalWrites makes every later write of the journal at jpath fail
// (a non-empty directory cannot be renamed over) and returns what it held:
// the directory and the journal are swapped in one rename, so what comes
// back is the last write that landed (a read, then a removal, could lose
// a write landing in between, and a test then put back an older journal).
func failJournalWrites(t *testing.T, jpath string) []byte {
	t.Helper()
	dir := jpath + ".failing"
	if err := os.MkdirAll(filepath.Join(dir, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, dir, unix.AT_FDCWD, jpath, unix.RENAME_EXCHANGE); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(dir) // (the journal now)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	return old
}

// restoreJournal puts back at jpath the journal failJournalWrites took.
func restoreJournal(t *testing.T, jpath string, old []byte) {
	t.Helper()
	if err := os.RemoveAll(jpath); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jpath, old, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitGroupSize waits until process group pgid has n live members.
func waitGroupSize(t *testing.T, pgid, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(proctest.InGroup(pgid)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("group %d: %d members after 10 s, want %d", pgid, len(proctest.InGroup(pgid)), n)
		}
		time.Sleep(10 * time.Millisecond) // the shell starting its children; no event for that
	}
}

// TestCoveredIntentsNotRecovered: a job whose start the journal covers
// (it finished, was journaled, then removed) is not brought back by its
// intent after a crash: covered intents are never taken for new ones.
func TestCoveredIntentsNotRecovered(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	j, fin, err := s.client.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"true"}}, 10*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: %v %v", fin, err)
	}
	jpath := filepath.Join(e.state, "journal.json")
	waitJournal(t, jpath, "the finished job", func(f *journal.File) bool {
		return slices.ContainsFunc(f.Jobs, func(r journal.Record) bool { return r.JobID == j.JobID && r.State == "exited" })
	})
	if err := s.client.Remove(ctx, j.JobID); err != nil {
		t.Fatal(err)
	}
	waitJournal(t, jpath, "the job removed", func(f *journal.File) bool {
		return !slices.ContainsFunc(f.Jobs, func(r journal.Record) bool { return r.JobID == j.JobID })
	})
	s.kill9()
	s2 := e.start(t)
	if _, err := s2.client.Status(ctx, j.JobID); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Errorf("a removed job after the crash: %v, want not-found", err)
	}
}

// TestSpawnsUnderCrashes: a client spawns jobs (shell trees) one after
// another while the supervisor is killed (SIGKILL) at random moments,
// five times, with cgroups and without. Every spawn that was answered is
// known to the next run (never not-found: the journal or its intents have
// it), and no process of any spawn is left running, not even of one that
// was never answered (the supervisor died between its fork and its
// intent): its cgroup, or without cgroups the mark in its processes'
// environment, finds it.
func TestSpawnsUnderCrashes(t *testing.T) { bothCgroupModes(t, spawnsUnderCrashes) }

func spawnsUnderCrashes(t *testing.T, _ bool, flags []string) {
	e := newEnv(t)
	// Each spawn's sleeps run "sleep 30.<n>": n tells which spawn a
	// leftover process came from.
	tag := fmt.Sprintf("%d", 100000+rand.IntN(800000))
	leftovers := func() map[int][]int { // spawn n -> live pids
		out := map[int][]int{}
		proc.Each(func(p proc.Process) bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.Pid))
			if err != nil || p.Zombie {
				return true
			}
			args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
			if len(args) == 2 && args[0] == "sleep" && strings.HasPrefix(args[1], "30."+tag) {
				if n, err := strconv.Atoi(strings.TrimPrefix(args[1], "30."+tag)); err == nil {
					out[n] = append(out[n], p.Pid)
				}
			}
			return true
		})
		return out
	}
	t.Cleanup(func() {
		for _, pids := range leftovers() {
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL) // (only this test's: its tag is in their argv)
			}
		}
	})
	acked := map[int]protocol.JobInfo{} // spawn n -> its job
	n := 0
	for round := 0; round < 5; round++ {
		s := e.start(t, flags...)
		// What the previous run was told: all known, nothing left.
		ctx := ctxFor(t, 30*time.Second)
		for k, j := range acked {
			if info, err := s.client.Status(ctx, j.JobID); err != nil {
				t.Errorf("round %d: spawn %d (job %s, answered before a crash): %v", round, k, j.JobID, err)
			} else if info.State != protocol.StateExited {
				t.Errorf("round %d: spawn %d (job %s): state %s after the restart", round, k, j.JobID, info.State)
			}
		}
		for k, pids := range leftovers() {
			// (one never answered, forked just before the crash, is in
			// no record: its cgroup, or its mark, finds it)
			_, ok := acked[k]
			t.Errorf("round %d: spawn %d (answered: %v) left processes %v", round, k, ok, pids)
		}
		if t.Failed() {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				n++
				j, err := s.client.Spawn(context.Background(), protocol.SpawnArgs{
					Shell: fmt.Sprintf("sleep 30.%s%d & sleep 30.%s%d & wait", tag, n, tag, n)})
				if err != nil {
					return // (the supervisor is gone)
				}
				acked[n] = j
			}
		}()
		time.Sleep(time.Duration(30+rand.IntN(200)) * time.Millisecond) // a random moment to crash at
		s.kill9()
		<-done
	}
	s := e.start(t, flags...) // (reconciles the last crash)
	ctx := ctxFor(t, 30*time.Second)
	for k, j := range acked {
		if _, err := s.client.Status(ctx, j.JobID); err != nil {
			t.Errorf("last round: spawn %d (job %s): %v", k, j.JobID, err)
		}
	}
	for k, pids := range leftovers() {
		_, ok := acked[k]
		t.Errorf("last round: spawn %d (answered: %v) left processes %v", k, ok, pids)
	}
	t.Logf("%d spawns answered across 5 crashes", len(acked))
}

// TestLostJournalDoesNotReplayIntents: intents a journal write covered
// are not taken for job starts when that journal is lost later (corrupt,
// moved aside): a finished job would come back as interrupted, a stopped
// service would run again. (Here the covering write emptied the file; the
// covered mark that keeps covered lines still in it from being replayed
// is TestIntentsLifecycle's.)
func TestLostJournalDoesNotReplayIntents(t *testing.T) {
	e := newEnv(t)
	s := e.start(t)
	ctx := ctxFor(t, 60*time.Second)
	fin, done, err := s.client.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"true"}}, 10*time.Second)
	if err != nil || !done {
		t.Fatalf("spawn: %v %v", done, err)
	}
	svc, err := s.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{svc.Pgid}) })
	if _, err := s.client.Stop(ctx, svc.JobID); err != nil {
		t.Fatal(err)
	}
	jpath := filepath.Join(e.state, "journal.json")
	waitJournal(t, jpath, "both jobs finished", func(f *journal.File) bool {
		n := 0
		for _, r := range f.Jobs {
			if (r.JobID == fin.JobID || r.JobID == svc.JobID) && r.State == "exited" {
				n++
			}
		}
		return n == 2
	})
	s.kill9()
	if err := os.WriteFile(jpath, []byte("{not a journal"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2 := e.start(t)
	waitLog(t, s2, "journal unusable; moved aside")
	for _, id := range []string{fin.JobID, svc.JobID} {
		if info, err := s2.client.Status(ctx, id); protocol.CodeOf(err) != protocol.CodeNotFound {
			t.Errorf("job %s after its journal was lost: %+v %v, want not-found (its intent was covered)", id, info, err)
		}
	}
	if strings.Contains(s2.log.String(), "journal intents: job starts") {
		t.Errorf("covered intents replayed:\n%s", s2.log)
	}
}

// TestYoungJobDescendantsWithoutCgroups: without cgroups, the members of
// a job's group are recorded soon after it starts (not only at the
// periodic scan, here made 60 s): a leader that exits after the
// supervisor died leaves a descendant the next run can prove is the
// job's, and terminates (it was left running when the job was younger
// than the periodic scan).
func TestYoungJobDescendantsWithoutCgroups(t *testing.T) {
	deadLeaderLeavesDescendant(t, "--no-cgroups", "--journal-flush-interval", "60s")
}

// TestUnrecordedSpawnEnded: a job the crash kept out of every record (it
// was forked, then the supervisor died before its intent was written:
// here, the journal from before the spawn restored and the intents file
// removed) leaves nothing running after the restart, with cgroups (its
// cgroup is swept) and without (its processes carry the state's mark).
func TestUnrecordedSpawnEnded(t *testing.T) { bothCgroupModes(t, unrecordedSpawnEnded) }

func unrecordedSpawnEnded(t *testing.T, noCgroups bool, flags []string) {
	e := newEnv(t)
	s := e.start(t, flags...)
	ctx := ctxFor(t, 60*time.Second)
	jpath := filepath.Join(e.state, "journal.json")
	old := failJournalWrites(t, jpath)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 300 & setsid sleep 300 & wait"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	escaped := waitEscaped(t, j.Pgid, j.Pid, 2)
	killLater(t, escaped)
	s.kill9()
	restoreJournal(t, jpath, old)
	if err := os.Remove(jpath + ".intents"); err != nil {
		t.Fatal(err)
	}
	s2 := e.start(t, flags...)
	if pids := proctest.InGroup(j.Pgid); len(pids) > 0 {
		t.Errorf("processes of the unrecorded job left in its group: %v", pids)
	}
	if proctest.Alive(escaped) {
		t.Errorf("its descendant in a session of its own (pid %d) was left running", escaped)
	}
	if _, err := s2.client.Status(ctx, j.JobID); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Errorf("status of the unrecorded job: %v, want not-found", err)
	}
	if noCgroups {
		waitLog(t, s2, "found by their jobs' mark and terminated")
		if !strings.Contains(s2.log.String(), j.JobID) {
			t.Errorf("the log does not name the job:\n%s", s2.log)
		}
	}
}

// spawnEscapee spawns through s a job whose shell starts a process that
// leaves its group for a session of its own (setsid) and waits; it
// returns the job and that process's pid (both killed when the test ends
// if still there).
func spawnEscapee(t *testing.T, s *sup) (protocol.JobInfo, int) {
	t.Helper()
	j, err := s.client.Spawn(ctxFor(t, 30*time.Second), protocol.SpawnArgs{Shell: "setsid sleep 300 & wait"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	escaped := waitEscaped(t, j.Pgid, j.Pid, 1)
	killLater(t, escaped)
	return j, escaped
}

// killLater SIGKILLs pid when the test ends if it is still the process it
// is now (its pid may be another's by then).
func killLater(t *testing.T, pid int) {
	ticks, err := proc.StartTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if proc.Identify(pid, ticks, proc.BootID()) == proc.Ours {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// waitEscaped waits for the process of the job led by leader that left
// its group for a session of its own (setsid), and for group pgid to have
// n members; it returns the escaped process's pid.
func waitEscaped(t *testing.T, pgid, leader, n int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found []int
		proc.Each(func(p proc.Process) bool {
			if p.Sid == p.Pid && p.Pgid != pgid && !p.Zombie && slices.Contains(proctest.Children(leader), p.Pid) {
				found = append(found, p.Pid)
			}
			return true
		})
		if len(found) == 1 && len(proctest.InGroup(pgid)) >= n {
			return found[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process of the job in a session of its own: %v", found)
		}
		time.Sleep(10 * time.Millisecond) // the shell starting its children; no event for that
	}
}

// TestEscapedDescendantEndedAfterCrash: without cgroups, a descendant that
// left its job's group for a session of its own is still found after a
// crash (by the state's mark in its environment) and terminated with the
// rest of the job; the job's note says so.
func TestEscapedDescendantEndedAfterCrash(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--no-cgroups")
	ctx := ctxFor(t, 60*time.Second)
	j, escaped := spawnEscapee(t, s)
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the job", func(f *journal.File) bool {
		return slices.ContainsFunc(f.Jobs, func(r journal.Record) bool { return r.JobID == j.JobID })
	})
	s.kill9()
	s2 := e.start(t, "--no-cgroups")
	if proctest.Alive(escaped) {
		t.Errorf("the job's descendant in a session of its own (pid %d) was left running", escaped)
	}
	info, err := s2.client.Status(ctx, j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if info.Reason != protocol.ReasonSupervisorRestart || !strings.Contains(info.Error, "found by the job's mark and terminated") {
		t.Errorf("after the restart: reason %s, error %q", info.Reason, info.Error)
	}
}

// TestMarkSweepOnlyAfterCrash: without cgroups, a process a job left
// outside its group ends with the supervisor's clean stop (the job ended,
// the process was adopted: its mark tells its job); the next start then
// looks for nothing (its predecessor left nothing it knows of) and makes a
// new mark, so that what carries the old one is never hunted; after a
// crash, what carries the current mark is ended.
func TestMarkSweepOnlyAfterCrash(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--no-cgroups")
	_, escaped := spawnEscapee(t, s)
	ticks, _ := proc.StartTicks(escaped)
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	if proc.Identify(escaped, ticks, proc.BootID()) == proc.Ours {
		t.Errorf("the job's descendant in a session of its own outlived the clean stop:\n%s", s.log)
	}
	// Processes carrying a mark, as a job's would.
	markPath := filepath.Join(e.state, "state-id")
	readMark := func() string {
		b, err := os.ReadFile(markPath)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	marked := func(mark, job string) func() bool {
		cmd := exec.Command("sleep", "300")
		cmd.Env = append(os.Environ(), proc.EnvJobID+"="+job, proc.EnvStateID+"="+mark)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return func() bool { p, ok := proc.Lookup(cmd.Process.Pid); return ok && !p.Zombie }
	}
	m1 := readMark()
	old := marked(m1, "j-before-the-clean-stop")
	s2 := e.start(t, "--no-cgroups")
	if !old() {
		t.Fatalf("after a clean stop, the next start ended a process carrying the mark:\n%s", s2.log)
	}
	m2 := readMark()
	if m2 == m1 {
		t.Fatal("the mark was not renewed after a clean stop")
	}
	current := marked(m2, "j-current")
	s2.kill9()
	s3 := e.start(t, "--no-cgroups")
	if current() {
		t.Error("after a crash, a process carrying the state's mark was left running")
	}
	if !old() {
		t.Error("a process carrying the mark of before a clean stop was ended after a later crash")
	}
	waitLog(t, s3, "found by their jobs' mark and terminated")
	if !strings.Contains(s3.log.String(), "j-current") {
		t.Errorf("the log does not name the job:\n%s", s3.log)
	}
}

// A stop whose last journal write fails says so (no retry follows), and is
// still noted as clean in the lock file when every job ended: the note
// means that nothing of this run is left running, which the journal does
// not change (the next start reads the older journal and the intents file
// for what became of the jobs).
func TestStopWithFailedJournal(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--no-cgroups")
	// (writes fail from before the spawn: the job is known to the next
	// start from the intents file alone. Failed after it, a write that
	// recorded the job, and let its intent go, could land between the
	// read of the journal put back below and its removal: the job was
	// then nowhere, as no real stop can leave it.)
	jpath := filepath.Join(e.state, "journal.json")
	old := failJournalWrites(t, jpath)
	j, err := s.client.Spawn(ctxFor(t, 10*time.Second), protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	if !strings.Contains(s.log.String(), "journal write at shutdown failed") {
		t.Errorf("the failed last journal write is not reported as such:\n%s", s.log)
	}
	if p, ok := proc.Lookup(j.Pid); ok && !p.Zombie {
		t.Errorf("job process %d outlived the stop", j.Pid)
	}
	lock, err := os.ReadFile(filepath.Join(e.state, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(lock), "\nstopped\n") {
		t.Errorf("a stop that left nothing running was not noted as clean:\n%q", lock)
	}
	restoreJournal(t, jpath, old)
	s2 := e.start(t, "--no-cgroups")
	info, err := s2.client.Status(ctxFor(t, 10*time.Second), j.JobID)
	if err != nil {
		t.Fatalf("the job is unknown to the next start: %v\n%s", err, s2.log)
	}
	if info.State != protocol.StateExited {
		t.Errorf("the job is %s after the restart; want exited", info.State)
	}
}

// TestKill9WithQueuedJob: a job queued for a slot is journaled as such;
// after the supervisor is SIGKILLed the next run reports it ended
// (supervisor-restart, saying it never started), not lost and not run.
func TestKill9WithQueuedJob(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--max-jobs", "1")
	ctx := ctxFor(t, 60*time.Second)
	busy, err := s.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{busy.Pgid}) })
	q, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "echo ran", Queue: true})
	if err != nil || q.State != protocol.StateQueued {
		t.Fatalf("queued spawn: %+v, %v", q, err)
	}
	waitJournal(t, filepath.Join(e.state, "journal.json"), "the queued job", func(f *journal.File) bool {
		for _, r := range f.Jobs {
			if r.JobID == q.JobID && r.State == "queued" {
				return true
			}
		}
		return false
	})
	s.kill9()
	s2 := e.start(t, "--max-jobs", "1")
	info, err := s2.client.Status(ctx, q.JobID)
	if err != nil || info.State != protocol.StateExited || info.Reason != protocol.ReasonSupervisorRestart ||
		!strings.Contains(info.Error, "never started") || info.StdoutBytes != 0 {
		t.Fatalf("the queued job after the crash: %+v, %v", info, err)
	}
}

// TestKill9ServiceOutputOnDisk: a service (output on disk by default)
// prints faster than the journal is written; the supervisor is SIGKILLed
// and restarted. Polled from 0, the output comes back byte for byte as
// far as the previous supervisor published it (the files have what the
// journal had not recorded), then a poll reports the crash gap, then the
// resumed run's output follows from its first line.
func TestKill9ServiceOutputOnDisk(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--journal-flush-interval", "30s")
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{
		Shell:   "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.02; done",
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways},
	})
	if err != nil || !j.OutputDisk {
		t.Fatalf("spawn: %+v, %v", j, err)
	}
	var before protocol.SubscribeResult
	for deadline := time.Now().Add(20 * time.Second); ; {
		if before, err = s.client.Subscribe(ctx, j.JobID, 1, 0); err != nil {
			t.Fatal(err)
		}
		if len(before.Events) > 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service published %d events", len(before.Events))
		}
		time.Sleep(20 * time.Millisecond) // polling the job's progress
	}
	// What the previous supervisor published, as the output it makes.
	var published []byte
	for _, ev := range before.Events {
		if o, err := ev.Output(); err == nil && o.Offset == int64(len(published)) {
			published = append(published, o.Data...)
		}
	}
	s.kill9()
	pgid := j.Pgid
	t.Cleanup(func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	s2 := e.start(t, "--journal-flush-interval", "30s")
	var got []byte
	gapAt := int64(-1)
	for cursor, deadline := int64(0), time.Now().Add(20*time.Second); ; {
		r, err := s2.client.Poll(ctx, j.JobID, cursor, 0)
		if err != nil {
			t.Fatal(err)
		}
		if r.CrashGap && gapAt < 0 {
			gapAt = cursor
		}
		t.Logf("poll %d: %d chunks, next %d, truncated %v crashGap %v more %v", cursor, len(r.Chunks), r.Next, r.Truncated, r.CrashGap, r.More)
		for _, c := range r.Chunks {
			if gapAt < 0 {
				got = append(got, c.Data...)
			} else {
				// the first chunk after the gap: the resumed run's
				if !bytes.HasPrefix(c.Data, []byte("line0\n")) {
					t.Fatalf("after the crash gap: %q, want the resumed run's first line", c.Data)
				}
				if !bytes.HasPrefix(got, published) {
					t.Fatalf("before the gap: %d bytes, not the %d the previous supervisor published", len(got), len(published))
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("polled to %d: gap at %d, %d bytes before it", cursor, gapAt, len(got))
		}
		if r.More {
			cursor = r.Next
			continue
		}
		time.Sleep(20 * time.Millisecond) // waiting for the resumed run's output
	}
}
