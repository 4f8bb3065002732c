package jobs

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// usageManager returns a Manager giving each job a cgroup (skipping the
// test where cgroup v2 is not writable), or one without cgroups (as with
// --no-cgroups); closed, its cgroups removed, when the test ends.
func usageManager(t testing.TB, withCgroups bool) *Manager {
	t.Helper()
	var opts []Option
	if withCgroups {
		base, err := cgroups.Detect("", fmt.Sprintf("exec-supervisor-usage-test-%d", os.Getpid()))
		if err != nil {
			t.Skipf("no writable cgroup v2 here (jobs would fall back to process groups): %v", err)
		}
		t.Cleanup(func() {
			if err := base.Close(); err != nil {
				t.Error(err)
			}
		})
		opts = append(opts, WithCgroups(base))
	}
	m := New(Config{MaxJobs: 2000, MergeInterval: time.Millisecond}, nil, nil, opts...)
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// spawnRunning spawns a job on m, SIGKILLed (its whole cgroup, or group)
// and waited for when the test ends.
func spawnRunning(t testing.TB, m *Manager, args protocol.SpawnArgs) *Job {
	t.Helper()
	info, err := m.Spawn(args)
	if err != nil {
		t.Fatal(err)
	}
	j, err := m.Get(info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = j.Kill(protocol.ReasonManualCancel, SigKill)
		select {
		case <-j.Done():
		case <-time.After(20 * time.Second):
			t.Errorf("job %s did not end when killed", j.id)
		}
	})
	return j
}

// waitUsage polls the job's usage (status) until ok holds, for 10 s at
// most, and returns the last one.
func waitUsage(t *testing.T, m *Manager, j *Job, what string, ok func(protocol.Usage) bool) protocol.Usage {
	t.Helper()
	var last protocol.Usage
	for deadline := time.Now().Add(10 * time.Second); ; {
		if u := m.InfoWithUsage(j).Usage; u != nil {
			if last = *u; ok(last) {
				return last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen in 10 s; last usage %+v", what, last)
		}
		time.Sleep(20 * time.Millisecond) // CPU use has no event to wait on
	}
}

// TestUsageFromCgroup: a job's usage comes from its cgroup, which holds
// the child that left the job's process group and session (setsid) and
// spins: counted, with its CPU, where the process-group scan sees only
// the waiting shell.
func TestUsageFromCgroup(t *testing.T) {
	m := usageManager(t, true)
	j := spawnRunning(t, m, protocol.SpawnArgs{Shell: `setsid sh -c 'while :; do :; done' & wait`})
	u := waitUsage(t, m, j, "the escaped spinner's CPU in the job's usage", func(u protocol.Usage) bool {
		return u.Processes >= 2 && u.CPUSeconds > 0.2 && u.CPUPercent > 20 && u.RSSBytes > 0
	})
	t.Logf("usage from the cgroup: %+v", u)
	pgid := j.Info().Pgid
	if a := sampleUsage(map[int]bool{pgid: true}, nil)[pgid]; a == nil || a.procs != 1 || a.cpu > 0.1 {
		t.Fatalf("the process-group scan should see only the waiting shell: %+v", a)
	}
}

// TestUsageWithoutCgroups: without cgroups (--no-cgroups), a job's usage
// is its process group's, from the process table.
func TestUsageWithoutCgroups(t *testing.T) {
	m := usageManager(t, false)
	j := spawnRunning(t, m, protocol.SpawnArgs{Shell: `sleep 30 & while :; do :; done`})
	if j.Info().Cgroup != "" {
		t.Fatal("a job of a manager without cgroups has one")
	}
	waitUsage(t, m, j, "the group's two processes and the loop's CPU", func(u protocol.Usage) bool {
		return u.Processes == 2 && u.CPUSeconds > 0.2 && u.CPUPercent > 20 && u.RSSBytes > 0
	})
}

// TestUsageMemory: a shell holding 32 MiB in a variable shows at least
// that much memory, with a cgroup and without.
func TestUsageMemory(t *testing.T) {
	for _, cg := range []bool{true, false} {
		t.Run(fmt.Sprintf("cgroup=%v", cg), func(t *testing.T) {
			m := usageManager(t, cg)
			j := spawnRunning(t, m, protocol.SpawnArgs{Shell: `x=$(head -c 33554432 /dev/zero | tr '\0' a); echo held; sleep 30`})
			u := waitUsage(t, m, j, "32 MiB held", func(u protocol.Usage) bool { return u.RSSBytes >= 32<<20 })
			t.Logf("usage: %+v", u)
		})
	}
}

// TestUsageReusedWhileFresh: a job's usage sample is answered again
// (same SampledAt) until it is usageFresh old; then it is taken anew.
func TestUsageReusedWhileFresh(t *testing.T) {
	m := usageManager(t, false)
	var mu sync.Mutex
	now := time.Now()
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	j := spawnRunning(t, m, protocol.SpawnArgs{Argv: []string{"sleep", "30"}})
	first := m.InfoWithUsage(j).Usage
	if first == nil || first.Processes != 1 {
		t.Fatalf("first sample: %+v", first)
	}
	mu.Lock()
	now = now.Add(usageFresh - time.Millisecond)
	mu.Unlock()
	if u := m.InfoWithUsage(j).Usage; u == nil || *u != *first {
		t.Fatalf("a sample younger than %s was taken again: %+v, first %+v", usageFresh, u, first)
	}
	mu.Lock()
	now = now.Add(time.Millisecond)
	mu.Unlock()
	if u := m.InfoWithUsage(j).Usage; u == nil || u.SampledAt == first.SampledAt {
		t.Fatalf("a sample %s old was answered again: %+v", usageFresh, u)
	}
}
