package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// SpawnTrue measures /bin/true spawned and waited for through a
// supervisor (the spawn request, then the job's terminal event on the
// event socket at eventAddr) against os/exec Start+Wait (the first
// result), n of each across par workers, interleaved (see Interleave).
// Further runners (each one job, safe for par workers at once) are
// measured in the same rounds; their results follow the supervisor's.
func SpawnTrue(b *testing.B, c *client.Client, eventAddr string, n, par int, more ...func() error) []Result {
	spawn, stop := SpawnEventRunner(b, c, eventAddr)
	defer stop()
	direct := func() error { return exec.Command("/bin/true").Run() }
	return Interleave(b, n, par, append([]func() error{direct, spawn}, more...)...)
}

// SpawnEventRunner returns a runner (safe for several goroutines at once)
// that spawns /bin/true through c and waits for the job's terminal event
// on the event socket at eventAddr, and a function that stops its
// subscriber. It returns once the subscription is live.
func SpawnEventRunner(b *testing.B, c *client.Client, eventAddr string) (run func() error, stop func()) {
	w := WatchEvents(b, c, eventAddr)
	run = func() error {
		j, err := c.Spawn(context.Background(), protocol.SpawnArgs{Argv: []string{"/bin/true"}})
		if err != nil {
			return err
		}
		defer w.Forget(j.JobID)
		if _, err := w.Ended(j.JobID, 10*time.Second); err != nil {
			return errors.New("no exit event within 10 s")
		}
		return nil
	}
	return run, w.Close
}

// SpawnWaitRunner runs /bin/true through c with spawn's waitMs: spawn
// and wait in one round trip, no event socket. Give it a supervisor of
// its own: a SpawnEventRunner subscriber on the same one would receive
// these jobs' events too, which a client that waits has no use for.
func SpawnWaitRunner(c *client.Client) func() error {
	return func() error {
		j, finished, err := c.SpawnWait(context.Background(), protocol.SpawnArgs{Argv: []string{"/bin/true"}}, 10*time.Second)
		if err == nil && !finished {
			err = fmt.Errorf("job %s not finished after 10 s", j.JobID)
		}
		return err
	}
}

// Result is what Interleave measured of one runner.
type Result struct {
	Rate float64 // runs per second
	// CPU is this process's CPU time (user + system, all its threads)
	// per run while the runner ran: for a client of a supervisor, the
	// client's cost of a job; for os/exec, what starting and waiting for
	// the process costs its parent.
	CPU time.Duration
}

// Interleave runs each runner n times across par workers and returns
// their rates (runs per second) and this process's CPU time per run of
// each. They take turns in batches of 50, so that all of them see the
// same machine (load on shared machines drifts within seconds). The
// benchmark timer covers the rounds only.
func Interleave(b *testing.B, n, par int, runners ...func() error) []Result {
	run := func(k int, one func() error) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < par; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(k) {
					if err := one(); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	took := make([]time.Duration, len(runners))
	cpu := make([]time.Duration, len(runners))
	b.ResetTimer()
	for k := 0; k < n; {
		batch := min(50, n-k)
		for i, r := range runners {
			c0 := selfCPU()
			took[i] += run(batch, r)
			cpu[i] += selfCPU() - c0
		}
		k += batch
	}
	b.StopTimer()
	res := make([]Result, len(runners))
	for i, d := range took {
		res[i] = Result{Rate: float64(n) / d.Seconds(), CPU: cpu[i] / time.Duration(n)}
	}
	return res
}

// SelfCPU is this process's CPU time so far (all threads; not its
// children's).
func SelfCPU() time.Duration { return selfCPU() }

// selfCPU is this process's CPU time so far (all threads).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcUsage is a process's CPU time and context switches so far.
type ProcUsage struct {
	CPU      time.Duration
	Switches int64 // voluntary and involuntary, summed over its live threads
}

// ReadProcUsage reads pid's CPU time (from /proc/PID/stat, in USER_HZ:
// 10 ms ticks) and context switches (/proc/PID/task/*/status).
func ReadProcUsage(pid int) (ProcUsage, error) {
	var u ProcUsage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command (which may hold spaces) start after
	// its closing parenthesis; utime and stime are the 14th and 15th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return u, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return u, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	u.CPU = time.Duration(ut+st) * 10 * time.Millisecond
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil {
		return u, err
	}
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				u.Switches += n
			}
		}
	}
	return u, nil
}

// Sub returns u - v.
func (u ProcUsage) Sub(v ProcUsage) ProcUsage {
	return ProcUsage{CPU: u.CPU - v.CPU, Switches: u.Switches - v.Switches}
}

// ReportRates reports a baseline and a measured rate and their ratio.
func ReportRates(b *testing.B, direct, sup float64, unit string) {
	b.ReportMetric(direct, "direct-"+unit)
	b.ReportMetric(sup, "supervisor-"+unit)
	b.ReportMetric(sup/direct, "ratio")
	b.ReportMetric(0, "ns/op")
}

// Percentile returns the q-quantile of d (sorted in place) in µs.
func Percentile(d []time.Duration, q float64) float64 {
	slices.Sort(d)
	return float64(d[int(float64(len(d)-1)*q)].Microseconds())
}
