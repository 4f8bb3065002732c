package cgroups

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestSignalOnlyMembers: Signal reaches the cgroup's processes, each
// checked through a pidfd to be in the cgroup still; holds refuses a
// process elsewhere (what a pid read from cgroup.procs could have become
// after its process was reaped and the pid reused).
func TestSignalOnlyMembers(t *testing.T) {
	base := testBase(t)
	cg, fd, err := base.Create("sig")
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	t.Cleanup(func() { _ = cg.Remove(5 * time.Second) })
	in := exec.Command("sleep", "30")
	in.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if err := in.Start(); err != nil {
		t.Fatal(err)
	}
	out := exec.Command("sleep", "30")
	if err := out.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { out.Process.Kill(); out.Wait() }()
	if !cg.holds(in.Process.Pid) || cg.holds(out.Process.Pid) || cg.holds(os.Getpid()) {
		t.Fatalf("holds: member %v, outsider %v, us %v", cg.holds(in.Process.Pid), cg.holds(out.Process.Pid), cg.holds(os.Getpid()))
	}
	cg.Signal(syscall.SIGTERM)
	err = in.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("the member: %v", err)
	}
	if err := out.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the outsider was signalled: %v", err)
	}
}
