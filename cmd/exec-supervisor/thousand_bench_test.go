package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proctest"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
	"golang.org/x/sys/unix"
)

// BenchmarkThousandJobs's shape.
const (
	thousand    = 1000 // sleep jobs kept running (and direct sleeps)
	killedAtEnd = 980  // of them, killed at once from the clients
	clients     = 8    // clients (and goroutines of the baselines)
)

// BenchmarkThousandJobs measures the deployed supervisor (the built
// binary, its defaults) with 1,000 `sleep` jobs running, each figure
// beside its baseline from the same round, in this process:
//
//   - spawn1000-ms: spawning 1,000 sleep jobs from 8 clients (spawn
//     replies); direct-spawn1000-ms: os/exec Start of 1,000 sleeps from
//     8 goroutines.
//   - kill-p50-µs, kill-p99-µs: a kill's reply (SIGTERM path), one at a
//     time, a new job keeping the count at 1,000; direct-kill-p50-µs,
//     direct-kill-p99-µs: kill(2) of a process.
//   - status-one-p50-µs: status of one job; procread-one-p50-µs: reading
//     one /proc/PID/stat.
//   - status-all-p50-µs: status of every job (usage included);
//     procread-all-p50-µs: reading the jobs' 1,000 /proc/PID/stat files.
//   - first-output-p50-µs: from sending the spawn of `echo hi; sleep 5`
//     to its output event reaching a subscriber, default merge window;
//     direct-first-output-p50-µs: from os/exec Start of the same to its
//     first byte read from the pipe. The same with no job running:
//     idle-first-output-p50-µs, idle-direct-first-output-p50-µs.
//   - kill980-ms: 980 of the jobs killed from 8 clients, until every
//     terminal event reached a subscriber; direct-kill980-ms: 980
//     processes killed from 8 goroutines until all were reaped.
//
// Each of b.N rounds starts from no job and ends with none (its jobs
// removed). One round took ~35 s on two shared cores, most of it in the
// kills (each kill's reply waits for a journal write of every job), so
// that make bench's -benchtime 2s runs one. Skipped when this process may
// not open enough descriptors.
func BenchmarkThousandJobs(b *testing.B) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Max < 16384 {
		b.Skipf("RLIMIT_NOFILE hard limit %d (%v): the supervisor needs ~10,000 descriptors for 1,100 jobs, this process ~1,100", rl.Max, err)
	}
	dir := b.TempDir()
	bin := filepath.Join(dir, "exec-supervisor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	c, evt, _ := startBinary(b, bin, filepath.Join(dir, "a"), "--max-jobs", "1100")
	cs := []*client.Client{c}
	for len(cs) < clients {
		more := client.New(c.Options())
		b.Cleanup(func() { more.Close() })
		cs = append(cs, more)
	}
	w := proctest.WatchEvents(b, c, evt)
	defer w.Close()
	var r thousandFigures
	b.ResetTimer()
	for range b.N {
		thousandRound(b, cs, w, &r)
	}
	b.StopTimer()
	q := proctest.Percentile
	ms := func(d []time.Duration) float64 { return q(d, .5) / 1000 }
	b.ReportMetric(ms(r.spawn), "spawn1000-ms")
	b.ReportMetric(ms(r.directSpawn), "direct-spawn1000-ms")
	b.ReportMetric(q(r.kill, .5), "kill-p50-µs")
	b.ReportMetric(q(r.kill, .99), "kill-p99-µs")
	b.ReportMetric(q(r.directKill, .5), "direct-kill-p50-µs")
	b.ReportMetric(q(r.directKill, .99), "direct-kill-p99-µs")
	b.ReportMetric(q(r.statusOne, .5), "status-one-p50-µs")
	b.ReportMetric(q(r.procOne, .5), "procread-one-p50-µs")
	b.ReportMetric(q(r.statusAll, .5), "status-all-p50-µs")
	b.ReportMetric(q(r.procAll, .5), "procread-all-p50-µs")
	b.ReportMetric(q(r.firstOut, .5), "first-output-p50-µs")
	b.ReportMetric(q(r.directFirstOut, .5), "direct-first-output-p50-µs")
	b.ReportMetric(q(r.firstOutIdle, .5), "idle-first-output-p50-µs")
	b.ReportMetric(q(r.directFirstOutIdle, .5), "idle-direct-first-output-p50-µs")
	b.ReportMetric(ms(r.kill980), "kill980-ms")
	b.ReportMetric(ms(r.directKill980), "direct-kill980-ms")
	b.ReportMetric(0, "ns/op")
}

// thousandFigures collects BenchmarkThousandJobs's samples over rounds.
type thousandFigures struct {
	spawn, directSpawn, kill, directKill, statusOne, procOne, statusAll, procAll,
	firstOut, directFirstOut, firstOutIdle, directFirstOutIdle, kill980, directKill980 []time.Duration
}

// Samples per round.
const (
	killSamples      = 100
	statusOneSamples = 200
	statusAllSamples = 10
	firstOutSamples  = 20
)

func thousandRound(b *testing.B, cs []*client.Client, w *proctest.EventWatch, r *thousandFigures) {
	ctx := context.Background()
	c := cs[0]
	// end waits for a killed job's end, forgets and removes it.
	end := func(id string) {
		if _, err := w.Ended(id, 20*time.Second); err != nil {
			b.Fatalf("job %s: no terminal event after its kill: %v", id, err)
		}
		w.Forget(id)
		if err := c.Remove(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	// First output with no job running.
	firstOutput(b, c, w, end, &r.firstOutIdle, &r.directFirstOutIdle)

	// 1,000 of each, the direct ones first.
	t0 := time.Now()
	direct := make([]*exec.Cmd, thousand)
	fanOut(b, thousand, func(i int) error {
		direct[i] = exec.Command("sleep", "600")
		return direct[i].Start()
	})
	r.directSpawn = append(r.directSpawn, time.Since(t0))
	done := false
	defer func() { // (a round that failed half-way leaves nothing behind)
		for _, cmd := range direct {
			if !done && cmd != nil && cmd.Process != nil && cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		}
	}()
	jobs := make([]protocol.JobInfo, thousand)
	t0 = time.Now()
	fanOutClients(b, cs, thousand, func(c *client.Client, i int) (err error) {
		jobs[i], err = c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "600"}})
		return err
	})
	r.spawn = append(r.spawn, time.Since(t0))
	defer func() {
		for _, j := range jobs {
			if !done && j.JobID != "" {
				_, _ = c.Kill(ctx, j.JobID, "SIGKILL")
			}
		}
	}()

	// kill(2) of a process and a kill's reply, one at a time, each
	// replaced at once: 1,000 of each keep running.
	for i := range killSamples {
		k := i % thousand
		t0 := time.Now()
		if err := syscall.Kill(direct[k].Process.Pid, syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		r.directKill = append(r.directKill, time.Since(t0))
		_ = direct[k].Wait()
		direct[k] = exec.Command("sleep", "600")
		if err := direct[k].Start(); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		if _, err := c.Kill(ctx, jobs[k].JobID, ""); err != nil {
			b.Fatal(err)
		}
		r.kill = append(r.kill, time.Since(t0))
		end(jobs[k].JobID)
		var err error
		if jobs[k], err = c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "600"}}); err != nil {
			b.Fatal(err)
		}
	}

	// Status of one job; of all of them.
	stat := func(pid int) error {
		_, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err
	}
	for i := range statusOneSamples {
		j := jobs[i%thousand]
		t0 := time.Now()
		if err := stat(j.Pid); err != nil {
			b.Fatal(err)
		}
		r.procOne = append(r.procOne, time.Since(t0))
		t0 = time.Now()
		if _, err := c.Status(ctx, j.JobID); err != nil {
			b.Fatal(err)
		}
		r.statusOne = append(r.statusOne, time.Since(t0))
	}
	for range statusAllSamples {
		t0 := time.Now()
		for _, j := range jobs {
			if err := stat(j.Pid); err != nil {
				b.Fatal(err)
			}
		}
		r.procAll = append(r.procAll, time.Since(t0))
		var res protocol.StatusResult
		t0 = time.Now()
		if err := c.Call(ctx, protocol.OpStatus, &protocol.JobArgs{}, &res); err != nil {
			b.Fatal(err)
		}
		r.statusAll = append(r.statusAll, time.Since(t0))
		if len(res.Jobs) < thousand {
			b.Fatalf("status of all: %d jobs, want %d or more", len(res.Jobs), thousand)
		}
	}

	// First output, with the default merge window.
	firstOutput(b, c, w, end, &r.firstOut, &r.directFirstOut)

	// 980 killed from 8 goroutines (clients) until all ended.
	t0 = time.Now()
	fanOut(b, killedAtEnd, func(i int) error { return direct[i].Process.Signal(syscall.SIGTERM) })
	fanOut(b, killedAtEnd, func(i int) error { _ = direct[i].Wait(); return nil })
	r.directKill980 = append(r.directKill980, time.Since(t0))
	t0 = time.Now()
	fanOutClients(b, cs, killedAtEnd, func(c *client.Client, i int) error {
		_, err := c.Kill(ctx, jobs[i].JobID, "")
		return err
	})
	var last time.Time
	for _, j := range jobs[:killedAtEnd] {
		at, err := w.Ended(j.JobID, 60*time.Second)
		if err != nil {
			b.Fatalf("job %s: no terminal event after its kill: %v", j.JobID, err)
		}
		last = laterOf(last, at)
	}
	r.kill980 = append(r.kill980, last.Sub(t0))

	// The rest ended too, every job is removed: the next round starts
	// from none.
	for _, j := range jobs[killedAtEnd:] {
		if _, err := c.Kill(ctx, j.JobID, "SIGKILL"); err != nil {
			b.Fatal(err)
		}
	}
	fanOut(b, thousand-killedAtEnd, func(i int) error {
		_ = direct[killedAtEnd+i].Process.Kill()
		_ = direct[killedAtEnd+i].Wait()
		return nil
	})
	for _, j := range jobs {
		end(j.JobID)
	}
	done = true
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// firstOutput samples the time from sending the spawn of `echo hi;
// sleep 5` to its output event reaching w (into sup), and the time from
// os/exec Start of the same to its first byte read (into direct). end
// waits for a killed job's end and removes it.
func firstOutput(b *testing.B, c *client.Client, w *proctest.EventWatch, end func(id string), sup, direct *[]time.Duration) {
	ctx := context.Background()
	for range firstOutSamples {
		d, err := directFirstOutput()
		if err != nil {
			b.Fatal(err)
		}
		*direct = append(*direct, d)
		t0 := time.Now()
		j, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "echo hi; sleep 5"})
		if err != nil {
			b.Fatal(err)
		}
		at, err := w.FirstOutput(j.JobID, 20*time.Second)
		if err != nil {
			b.Fatalf("job %s: no output event: %v", j.JobID, err)
		}
		*sup = append(*sup, at.Sub(t0))
		if _, err := c.Kill(ctx, j.JobID, "SIGKILL"); err != nil {
			b.Fatal(err)
		}
		end(j.JobID)
	}
}

// directFirstOutput starts `echo hi; sleep 5` with os/exec and returns
// how long its first byte took to be read from the pipe.
func directFirstOutput() (time.Duration, error) {
	cmd := exec.Command("sh", "-c", "echo hi; sleep 5")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var buf [1]byte
	if _, err := out.Read(buf[:]); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// fanOut runs f(0..n-1) across 8 goroutines.
func fanOut(b *testing.B, n int, f func(i int) error) {
	fanOutClients(b, make([]*client.Client, clients), n, func(_ *client.Client, i int) error { return f(i) })
}

// fanOutClients runs f(c, 0..n-1) across one goroutine per client.
func fanOutClients(b *testing.B, cs []*client.Client, n int, f func(c *client.Client, i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(c, i); err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
	}
}
