package server

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/internal/cpuhome"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// cpusAllowed reads a process's Cpus_allowed_list line (its main
// thread's set) from status text.
func cpusAllowed(status string) string {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// While the supervisor's threads are pinned, its jobs (plain, shell and
// pty) still start with every CPU it may use; stopping spreads its
// threads again. Not parallel: it pins this test process's threads.
func TestCPUHomeJobsGetEveryCPU(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		t.Skipf("this process may use %d CPU: nothing to place (needs 2 or more)", all.Count())
	}
	self, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	want := cpusAllowed(string(self))
	cfg := testConfig(t)
	cfg.CPUHome = true
	// Pinned at the first sample, never spread by load (the machine may
	// be busy with other tests).
	cfg.CPUHomeTuning = cpuhome.Config{Period: 20 * time.Millisecond, Quiet: 100, Busy: 100, Crowded: 100, CrowdedBusy: 100}
	ts := startServer(t, cfg)
	eventually(t, 10*time.Second, "threads pinned", func() bool { return ts.cpu.Current() >= 0 })
	home := ts.cpu.Current()
	if v := value(scrape2(t, ts), "exec_supervisor_cpu_home"); v != float64(home) {
		t.Fatalf("cpu_home metric %v; want %d", v, home)
	}
	if v := value(scrape2(t, ts), "exec_supervisor_cpu_home_changes_total", "to", "pinned"); v != 1 {
		t.Fatalf("cpu_home_changes_total{to=pinned} %v; want 1", v)
	}
	for _, a := range []protocol.SpawnArgs{
		{Argv: []string{"cat", "/proc/self/status"}},
		{Shell: "cat /proc/self/status"},
		{Argv: []string{"cat", "/proc/self/status"}, Pty: &protocol.PtyArgs{}},
	} {
		for i := 0; i < 5; i++ {
			j, err := ts.client.Spawn(ctxT(t, 10*time.Second), a)
			if err != nil {
				t.Fatal(err)
			}
			out, _, exit, _ := waitDone(t, ts.client, j.JobID, 10*time.Second)
			if exit.ExitCode == nil || *exit.ExitCode != 0 {
				t.Fatalf("job ended %+v", exit)
			}
			if got := cpusAllowed(strings.ReplaceAll(out, "\r", "")); got != want {
				t.Fatalf("job %v started with CPUs %q; want the supervisor's %q", a, got, want)
			}
		}
	}
	if ts.cpu.Current() != home {
		t.Fatalf("home moved from %d to %d: the jobs did not all start while pinned", home, ts.cpu.Current())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.Close(ctx); err != nil {
		t.Fatal(err)
	}
	tids, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tids {
		var got unix.CPUSet
		tid, err := strconv.Atoi(e.Name())
		if err == nil && unix.SchedGetaffinity(tid, &got) == nil && got != all {
			t.Fatalf("thread %d still has %d CPUs after the server stopped; want %d", tid, got.Count(), all.Count())
		}
	}
}
