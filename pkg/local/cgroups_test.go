package local_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/pkg/local"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestCgroupEndsEscapes: in origin mode too, each job gets a cgroup
// of its own where the process may make them, so that a descendant that
// left the job's process group (setsid) ends with the job; Close removes
// the cgroups.
func TestCgroupEndsEscapes(t *testing.T) {
	e := local.New(0)
	ok, why := e.Cgroups()
	if !ok {
		e.Close(context.Background())
		t.Skipf("no cgroup per job here (%s): nothing to test", why)
	}
	ctx := ctxT(t, 20*time.Second)
	j, err := e.Start(ctx, protocol.SpawnArgs{Shell: "setsid sleep 300 & echo $!"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := readAll(t, j.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("no pid printed: %q", out)
	}
	if proctest.Alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the job's setsid descendant %d outlived it", pid)
	}
	dir := localBase(t)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the job cgroup directory %s is left after Close (%v)", dir, err)
	}
}

// TestSweepsDeadEnginesCgroups: an Engine finds the cgroup base of an
// Engine whose process died (its jobs orphaned), ends what is in it and
// removes it; one of a live process is left alone.
func TestSweepsDeadEnginesCgroups(t *testing.T) {
	probe := local.New(0)
	ok, why := probe.Cgroups()
	dir := ""
	if ok {
		dir = filepath.Dir(localBase(t))
	}
	probe.Close(context.Background())
	if !ok {
		t.Skipf("no cgroup per job here (%s): nothing to test", why)
	}
	// A dead process's base (no such pid) with an orphan in a job cgroup
	// that has a cgroup of its own (a nested Engine's, say); a live
	// process's (pid 1, its start time); and a base of another pid
	// namespace (its pids are not ours to look up). Unique names: other
	// test runs may share this cgroup.
	ns := pidNS(t)
	tag := time.Now().UnixNano()
	dead := filepath.Join(dir, fmt.Sprintf("exec-supervisor-local-%d-4194301-%d-1", ns, tag))
	live := filepath.Join(dir, fmt.Sprintf("exec-supervisor-local-%d-1-%d-%d", ns, startTicks(t, 1), tag))
	other := filepath.Join(dir, fmt.Sprintf("exec-supervisor-local-%d-4194301-%d-1", ns+1, tag))
	for _, d := range []string{filepath.Join(dead, "c-x-1", "nested"), live, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(live); os.Remove(other) })
	orphan := exec.Command("sleep", "300")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orphan.Process.Kill(); orphan.Wait() })
	if err := os.WriteFile(filepath.Join(dead, "c-x-1", "cgroup.procs"), []byte(strconv.Itoa(orphan.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	e := local.New(0)
	defer e.Close(context.Background())
	if err := orphan.Wait(); err == nil {
		t.Fatal("the orphan exited by itself")
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead Engine's cgroup base is still there (%v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("a live process's base was touched: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("another pid namespace's base was touched: %v", err)
	}
}

// localBase is this process's Engine cgroup base (the one New made).
func localBase(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var own string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.HasPrefix(l, "0::") {
			own = strings.TrimPrefix(l, "0::")
		}
	}
	prefix := fmt.Sprintf("exec-supervisor-local-%d-%d-%d-", pidNS(t), os.Getpid(), startTicks(t, os.Getpid()))
	for _, mnt := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		ents, _ := os.ReadDir(filepath.Join(mnt, own))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix) {
				return filepath.Join(mnt, own, e.Name())
			}
		}
	}
	t.Fatal("no Engine cgroup base found")
	return ""
}

func pidNS(t *testing.T) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func startTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	v, err := proc.StartTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTwoEnginesInOneProcess: each Engine of a process has a cgroup base of
// its own: closing one leaves the other's jobs alone and able to start.
func TestTwoEnginesInOneProcess(t *testing.T) {
	a, b := local.New(0), local.New(0)
	defer a.Close(context.Background())
	if ok, why := a.Cgroups(); !ok {
		b.Close(context.Background())
		t.Skipf("no cgroup per job here (%s): nothing to test", why)
	}
	ctx := ctxT(t, 20*time.Second)
	jb, err := b.Start(ctx, protocol.SpawnArgs{Argv: []string{"true"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jb.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("close the second Engine: %v", err)
	}
	ja, err := a.Start(ctx, protocol.SpawnArgs{Shell: "echo still"}, 0)
	if err != nil {
		t.Fatalf("the first Engine after the second closed: %v", err)
	}
	if out, err := readAll(t, ja.Stdout()); err != nil || out != "still\n" {
		t.Fatalf("output %q %v", out, err)
	}
}
