package cgroups

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// TestOpenRecordedRefusesOtherPaths: a path from a journal names a job
// cgroup only if it is clean, absolute, in the cgroup2 mount, in a base
// with the given prefix, and named like a job cgroup.
func TestOpenRecordedRefusesOtherPaths(t *testing.T) {
	base := testBase(t) // (named exec-supervisor-limits-test-<pid>)
	mnt, err := cgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	cg, f, err := base.Create("c-recorded-1")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	defer cg.Remove(time.Second)
	if got := OpenRecorded(cg.Path, "exec-supervisor-"); got == nil || got.Path != cg.Path {
		t.Fatalf("OpenRecorded(%s) = %v", cg.Path, got)
	}
	for _, p := range []string{
		"", "relative/exec-supervisor-x/c-1", cg.Path + "/", cg.Path + "/../c-recorded-1",
		"/tmp/exec-supervisor-x/c-1",                      // not in the mount
		filepath.Join(mnt, "c-recorded-1"),                // not in a base
		filepath.Join(filepath.Dir(base.Dir), "x", "c-1"), // base without the prefix
		base.Dir, // the base itself
	} {
		if got := OpenRecorded(p, "exec-supervisor-"); got != nil {
			t.Errorf("OpenRecorded(%q) = %v, want nil", p, got.Path)
		}
	}
}

// TestRemoveNested: a job cgroup in which the job made cgroups of its own
// (a supervisor or a pkg/local Engine run as a job) is removed with them,
// deepest first, once its processes are gone (it stayed behind, and its
// base with it).
func TestRemoveNested(t *testing.T) {
	base := testBase(t)
	cg, fd, err := base.Create("nest")
	if err != nil {
		t.Fatal(err)
	}
	fd.Close()
	inner := filepath.Join(cg.Path, "exec-supervisor-local-x", "c-1")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	p := exec.Command("sleep", "30")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inner, "cgroup.procs"), []byte(strconv.Itoa(p.Process.Pid)), 0); err != nil {
		p.Process.Kill()
		p.Wait()
		t.Fatal(err)
	}
	if err := cg.Kill(); err != nil {
		t.Fatal(err)
	}
	p.Wait()
	if err := cg.Remove(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg.Path); !os.IsNotExist(err) {
		t.Fatalf("the job cgroup is still there: %v", err)
	}
}
