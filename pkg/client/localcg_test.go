package client_test

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

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestLocalCgroupEndsEscapes: in origin mode too, each job gets a cgroup
// of its own where the process may make them, so that a descendant that
// left the job's process group (setsid) ends with the job; Close removes
// the cgroups.
func TestLocalCgroupEndsEscapes(t *testing.T) {
	local := client.NewLocal(0)
	ok, why := local.Cgroups()
	if !ok {
		local.Close(context.Background())
		t.Skipf("no cgroup per job here (%s): nothing to test", why)
	}
	ctx := ctxT(t, 20*time.Second)
	j, err := local.Start(ctx, protocol.SpawnArgs{Shell: "setsid sleep 300 & echo $!"}, 0)
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
	if err := local.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the job cgroup directory %s is left after Close (%v)", dir, err)
	}
}

// TestLocalSweepsDeadLocalsCgroups: a Local finds the cgroup base of a
// Local whose process died (its jobs orphaned), ends what is in it and
// removes it; one of a live process is left alone.
func TestLocalSweepsDeadLocalsCgroups(t *testing.T) {
	probe := client.NewLocal(0)
	ok, why := probe.Cgroups()
	dir := ""
	if ok {
		dir = filepath.Dir(localBase(t))
	}
	probe.Close(context.Background())
	if !ok {
		t.Skipf("no cgroup per job here (%s): nothing to test", why)
	}
	// A dead process's base (no such pid) with an orphan in a job cgroup,
	// and a live process's (ours: pid 1's start time is not 1) with none.
	dead := filepath.Join(dir, "exec-supervisor-local-4194301-1")
	live := filepath.Join(dir, fmt.Sprintf("exec-supervisor-local-1-%d", startTicks(t, 1)))
	for _, d := range []string{filepath.Join(dead, "c-x-1"), live} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Remove(live) })
	orphan := exec.Command("sleep", "300")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { orphan.Process.Kill(); orphan.Wait() })
	if err := os.WriteFile(filepath.Join(dead, "c-x-1", "cgroup.procs"), []byte(strconv.Itoa(orphan.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	local := client.NewLocal(0)
	defer local.Close(context.Background())
	if err := orphan.Wait(); err == nil {
		t.Fatal("the orphan exited by itself")
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead Local's cgroup base is still there (%v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("a live process's base was touched: %v", err)
	}
}

// localBase is this process's Local cgroup base (the one NewLocal made).
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
	for _, mnt := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		d := filepath.Join(mnt, own, fmt.Sprintf("exec-supervisor-local-%d-%d", os.Getpid(), startTicks(t, os.Getpid())))
		if _, err := os.Stat(d); err == nil {
			return d
		}
	}
	t.Fatal("no Local cgroup base found")
	return ""
}

func startTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	v, err := jobs.ProcStartTicks(pid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
