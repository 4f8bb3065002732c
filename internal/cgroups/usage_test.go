package cgroups

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestUsageFiles: Usage reads CPU from cpu.stat (less what the cgroup
// had used before its job), the processes of the cgroup and of those
// below it, and memory from memory.stat where it exists (a directory
// of made-up files stands for the cgroup).
func TestUsageFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
	write("cgroup.procs", "10\n11\n")
	write("memory.stat", "anon 4096000\nfile 99999999\nkernel 777\nfile_mapped 8192\nshmem 5\n")
	if err := os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("sub/cgroup.procs", "12\n")
	write("sub/deeper/cgroup.procs", "13\n")
	c := &Cgroup{Path: dir}
	c.cpuBase.Store(500000)
	u, err := c.Usage()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(u.Pids)
	if u.CPU != 2*time.Second || !slices.Equal(u.Pids, []int{10, 11, 12, 13}) || !u.HasMemory || u.Memory != 4096000+8192 {
		t.Fatalf("usage: %+v", u)
	}
	os.Remove(filepath.Join(dir, "memory.stat")) // no memory controller
	if u, err := c.Usage(); err != nil || u.HasMemory {
		t.Fatalf("without memory.stat: %+v %v", u, err)
	}
	os.Remove(filepath.Join(dir, "cpu.stat"))
	if _, err := c.Usage(); err == nil {
		t.Fatal("no error without cpu.stat")
	}
}

// TestUsageCountsFromHandout: a cgroup back from the pool reports none
// of the CPU its earlier job used (50 ms or more); its processes are
// counted.
func TestUsageCountsFromHandout(t *testing.T) {
	base := testBase(t)
	run := func(fd int, argv ...string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	cg, fd, err := base.Acquire(false)
	if err != nil {
		t.Fatal(err)
	}
	held := cg // (released when the test ends, however it ends)
	t.Cleanup(func() {
		if held != nil {
			_ = base.Release(held, false, 5*time.Second)
		}
	})
	if err := run(fd, "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done").Wait(); err != nil {
		t.Fatal(err)
	}
	if u, err := cg.Usage(); err != nil || u.CPU < 50*time.Millisecond || len(u.Pids) != 0 {
		t.Fatalf("after the busy job: %+v %v", u, err)
	}
	held = nil
	if err := base.Release(cg, true, time.Second); err != nil {
		t.Fatal(err)
	}
	again, fd, err := base.Acquire(false)
	if err != nil {
		t.Fatal(err)
	}
	held = again
	if again != cg {
		t.Fatal("the pooled cgroup was not handed out again")
	}
	sleeper := run(fd, "sleep", "30")
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	u, err := again.Usage()
	if err != nil || u.CPU > 10*time.Millisecond || !slices.Equal(u.Pids, []int{sleeper.Process.Pid}) || u.HasMemory && u.Memory <= 0 {
		t.Fatalf("the next job's usage: %+v %v", u, err)
	}
}
