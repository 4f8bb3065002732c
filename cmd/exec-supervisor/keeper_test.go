package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/keeper"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestKeeperRestartsAfterCrashes: a supervisor under the keeper (--keep),
// SIGKILLed three times, is restarted after about 1, 2 and 4 s (the
// daemon seed's backoff), each crash in crash.log; its job, orphaned by
// the crash, is recovered and ended by the next run; SIGTERM to the keeper
// ends both, with no job left.
func TestKeeperRestartsAfterCrashes(t *testing.T) {
	e := newEnv(t)
	k := e.start(t, "--keep")
	ctx := ctxFor(t, 90*time.Second)
	j, err := k.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	supervisor := func() int {
		t.Helper()
		for {
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			h, err := k.client.Health(hctx)
			cancel()
			if err == nil {
				return h.Pid
			}
			if ctx.Err() != nil {
				t.Fatalf("no supervisor answering under the keeper: %v\n%s", err, k.log)
			}
			time.Sleep(50 * time.Millisecond) // polling while the keeper waits out its backoff
		}
	}
	pid := supervisor()
	if pid == k.cmd.Process.Pid {
		t.Fatal("the supervisor is the keeper itself")
	}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		next := supervisor()
		if took := time.Since(killed); next == pid || took < want {
			t.Fatalf("crash %d: supervisor pid %d -> %d after %v; want a new one after %v at least", i+1, pid, next, took, want)
		}
		pid = next
	}
	b, err := os.ReadFile(filepath.Join(e.state, "crash.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "=== CRASH "); n != 3 || !strings.Contains(string(b), "Ended: signal killed") {
		t.Fatalf("crash.log with %d entries:\n%s", n, b)
	}
	// The job orphaned by the first crash was ended by the next run.
	if proctest.Alive(j.Pid) || len(proctest.InGroup(j.Pgid)) > 0 {
		t.Fatalf("the job's process %d survived the crashes", j.Pid)
	}
	// SIGTERM to the keeper: both end; nothing is left.
	if err := k.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-k.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the keeper did not end on SIGTERM:\n%s", k.log)
	}
	if k.exitErr != nil {
		t.Fatalf("keeper exit: %v", k.exitErr)
	}
	if proctest.Alive(pid) {
		t.Fatalf("the supervisor (pid %d) outlived its keeper", pid)
	}
}

// TestExecctlDaemon: execctl daemon start runs a kept supervisor
// detached, status shows it and its crashes, stop ends it.
func TestExecctlDaemon(t *testing.T) {
	e := newEnv(t)
	ctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(execctlBinary, append([]string{"--control", e.ctl, "--event", e.evt}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("execctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := ctl("daemon", "start", "--state-dir", e.state, "--supervisor", binary, "--", "--metrics-addr", "", "--grace", "500ms")
	if !strings.Contains(out, "started: keeper pid") {
		t.Fatalf("daemon start: %s", out)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			exec.Command(execctlBinary, "daemon", "stop", "--state-dir", e.state).Run()
		}
	})
	st, ok, err := keeper.ReadStatus(e.state)
	if err != nil || !ok || st.SupervisorPid == 0 {
		t.Fatalf("keeper.json: %+v %v %v", st, ok, err)
	}
	if err := syscall.Kill(st.SupervisorPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out = ctl("daemon", "status", "--state-dir", e.state)
		if strings.Contains(out, "crash.log: 1 crashes") && strings.Contains(out, "running: keeper pid") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon status after a crash:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond) // polling for the keeper's record of the crash
	}
	if !strings.Contains(out, "Ended: signal killed") {
		t.Fatalf("daemon status shows no crash entry:\n%s", out)
	}
	if out := ctl("daemon", "stop", "--state-dir", e.state); !strings.Contains(out, "stopped") {
		t.Fatalf("daemon stop: %s", out)
	}
	stopped = true
	if proctest.Alive(st.Pid) {
		t.Fatalf("keeper pid %d still alive after stop", st.Pid)
	}
	if out := ctl("daemon", "status", "--state-dir", e.state); !strings.Contains(out, "not running") {
		t.Fatalf("status after stop: %s", out)
	}
}
