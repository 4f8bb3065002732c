package proc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTerminateGroupContinuesStopped: the orphaned group of an earlier
// run whose processes are stopped ends on TerminateGroup's SIGTERM (they
// are continued right after it), not on SIGKILL after the whole grace.
func TestTerminateGroupContinuesStopped(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	reaped := make(chan error, 1)
	go func() { reaped <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-reaped
	})
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); stateOf(pid) != "T"; {
		if time.Now().After(deadline) {
			t.Fatalf("not stopped: state %q", stateOf(pid))
		}
		time.Sleep(5 * time.Millisecond) // polling the process table
	}
	// (a grace far longer than the test waits for anything)
	killed, err := TerminateGroup(pid, false, 60*time.Second)
	if err != nil || killed {
		t.Fatalf("TerminateGroup: killed %v, %v; want ended by SIGTERM", killed, err)
	}
	select {
	case err := <-reaped:
		reaped <- err // (for the cleanup)
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Fatalf("ended by %v; want SIGTERM", cmd.ProcessState)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not reaped")
	}
}

// stateOf is the state letter of pid in /proc (T: stopped), or "".
func stateOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[0]
}
