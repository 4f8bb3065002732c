package cpuhome

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests pin and spread this test process's own threads: they run
// one at a time (no t.Parallel), and each leaves the threads spread.

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// needCPUs skips unless this process may use two CPUs or more, and
// returns its set.
func needCPUs(t *testing.T) unix.CPUSet {
	t.Helper()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	if all.Count() < 2 {
		t.Skipf("this process may use %d CPU: nothing to place (needs 2 or more)", all.Count())
	}
	return all
}

// threadSets returns the CPU set of each thread of this process.
func threadSets(t *testing.T) map[int]unix.CPUSet {
	t.Helper()
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]unix.CPUSet{}
	for _, tid := range tids {
		var s unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &s); err == nil {
			out[tid] = s
		}
	}
	return out
}

// allThreads reports whether every thread has set want.
func allThreads(t *testing.T, want unix.CPUSet) bool {
	for _, s := range threadSets(t) {
		if s != want {
			return false
		}
	}
	return true
}

// running returns a Home of cfg whose Run runs until stop is called (which
// waits for it; again: nothing).
func running(cfg Config) (h *Home, stop func()) {
	h = New(true, cfg, quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	return h, func() { cancel(); <-done }
}

// work keeps a goroutine doing n rounds of busy work, then pausing for
// pause (0: none), until the returned function is called (which waits for
// it).
func work(pause time.Duration, n int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for i := 0; i < n; i++ {
				runtime.KeepAlive(i)
			}
			if pause > 0 {
				select {
				case <-done:
					return
				case <-time.After(pause):
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// forkedSet starts `sleep 30` through h.Fork and returns the CPU set it
// started with (it is ended before this returns).
func forkedSet(h *Home) (unix.CPUSet, error) {
	var cmd *exec.Cmd
	var err error
	h.Fork(func() {
		cmd = exec.Command("sleep", "30")
		err = cmd.Start()
	})
	var got unix.CPUSet
	if err != nil {
		return got, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	err = unix.SchedGetaffinity(cmd.Process.Pid, &got)
	return got, err
}

// firstCPU is the lowest CPU of set.
func firstCPU(set unix.CPUSet) int {
	for cpu := 0; ; cpu++ {
		if set.IsSet(cpu) {
			return cpu
		}
	}
}

// eventually waits up to 10 s for cond, checking every 10 ms.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

func TestParseCPULine(t *testing.T) {
	for _, c := range []struct {
		line         string
		busy, total  uint64
		cpu          int
		ok           bool
		whatItChecks string
	}{
		{"cpu3 10 1 5 100 3 1 1 2 7 0", 20, 123, 3, true, "idle and iowait are not busy; steal is; guest is not counted twice"},
		{"cpu0 1 2 3 4", 6, 10, 0, true, "old kernels: four fields"},
		{"cpu  10 1 5 100 3 1 1 2 0 0", 0, 0, 0, false, "the total line"},
		{"cpuX 1 2 3 4 5", 0, 0, 0, false, "no CPU number"},
		{"cpu1 1 2 x 4 5", 0, 0, 0, false, "a field not a number"},
		{"cpu1 1 2", 0, 0, 0, false, "too short"},
		{"intr 1 2 3 4 5", 0, 0, 0, false, "another line"},
	} {
		busy, total, cpu, ok := parseCPULine([]byte(c.line))
		if ok != c.ok || ok && (busy != c.busy || total != c.total || cpu != c.cpu) {
			t.Errorf("%s: %q gave busy %d total %d cpu %d ok %v; want %d %d %d %v", c.whatItChecks, c.line, busy, total, cpu, ok, c.busy, c.total, c.cpu, c.ok)
		}
	}
}

// A job forked while the threads are pinned starts with the whole set;
// the forking thread is pinned again afterwards; spread gives every thread
// the whole set back.
func TestForkGetsWholeSet(t *testing.T) {
	all := needCPUs(t)
	h := New(true, Config{}, quietLog())
	if !h.Enabled() {
		t.Fatal("not enabled with two CPUs or more")
	}
	defer h.doSpread("test over")
	home := h.cpus[len(h.cpus)-1]
	if !h.pin(home, "test", use{}) {
		t.Fatal("pin refused")
	}
	if !allThreads(t, only(home)) {
		t.Fatalf("threads not all on CPU %d: %v", home, threadSets(t))
	}
	for i := 0; i < 20; i++ { // (on whatever threads the forks run)
		got, err := forkedSet(h)
		if err != nil {
			t.Fatal(err)
		}
		if got != all {
			t.Fatalf("child forked while pinned has %d CPUs, want the process's %d", got.Count(), all.Count())
		}
	}
	if !allThreads(t, only(home)) {
		t.Fatalf("a forking thread was not pinned again: %v", threadSets(t))
	}
	h.doSpread("test")
	if h.Current() != -1 || !allThreads(t, all) {
		t.Fatalf("spread left threads pinned: home %d, %v", h.Current(), threadSets(t))
	}
	if p, m, s := h.Changes(); p != 1 || m != 0 || s != 1 {
		t.Fatalf("changes pinned %d moved %d spread %d; want 1 0 1", p, m, s)
	}
}

// Forks racing the controller's pinning and spreading never start a child
// confined to the home.
func TestForksRacingPlacement(t *testing.T) {
	all := needCPUs(t)
	h := New(true, Config{}, quietLog())
	defer h.doSpread("test over")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int32
	var forks atomic.Int32
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var cmd *exec.Cmd
				var err error
				h.Fork(func() {
					cmd = exec.Command("true")
					err = cmd.Start()
				})
				if err != nil {
					bad.Add(1)
					return
				}
				var got unix.CPUSet
				if unix.SchedGetaffinity(cmd.Process.Pid, &got) == nil && got != all {
					bad.Add(1)
				}
				cmd.Wait()
				forks.Add(1)
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if i%2 == 0 {
			h.pin(h.cpus[i/2%len(h.cpus)], "test", use{})
		} else {
			h.doSpread("test")
		}
		if forks.Load() > 400 {
			break
		}
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d children started without the whole set (or failed to start)", bad.Load(), forks.Load())
	}
	if !allThreads(t, all) {
		t.Fatalf("threads left pinned after spread: %v", threadSets(t))
	}
}

// The placement follows the process's load: it pins the quiet process to
// the calmest CPU, spreads it when it gets busy, pins it again once quiet,
// moves a crowded home and never pins onto CPUs others keep busy. The
// periods are made up and handed to decide, so that what else runs on the
// machine cannot change the outcome (driven by real samples, this failed
// under load: with every CPU busy the controller rightly never pins).
func TestRunFollowsLoad(t *testing.T) {
	all := needCPUs(t)
	h := New(true, Config{Hold: time.Nanosecond, Quiet: 0.1, Busy: 0.2}, quietLog())
	defer h.doSpread("test over")
	var changed time.Time
	quiet := 0
	// One period of use: the process's own share, CPU first's and the
	// others' busy shares, its threads' run-queue wait.
	period := func(self, first, others, wait float64) {
		u := use{self: self, wait: wait, busy: make([]float64, len(h.cpus))}
		for i := range u.busy {
			u.busy[i] = others
		}
		u.busy[0] = first
		h.decide(u, &changed, &quiet)
	}
	calmest := h.cpus[1] // (the first is the busier in the calm periods below)
	placed := func(what string, home int) {
		t.Helper()
		want := all
		if home >= 0 {
			want = only(home)
		}
		if h.Current() != home || !allThreads(t, want) {
			t.Fatalf("%s: home %d, want %d; threads %v", what, h.Current(), home, threadSets(t))
		}
	}

	period(0.05, 0.3, 0.1, 0)
	placed("one quiet period (a lull as often as not)", -1)
	period(0.05, 0.3, 0.1, 0)
	placed("two quiet periods: pinned to the calmest CPU", calmest)
	period(0.5, 0.3, 0.6, 0)
	placed("busy: spread", -1)
	period(0.05, 0.3, 0.1, 0)
	period(0.05, 0.3, 0.1, 0)
	placed("quiet again: pinned again", calmest)
	if p, m, s := h.Changes(); p != 2 || m != 0 || s != 1 {
		t.Fatalf("changes pinned %d moved %d spread %d; want 2 0 1", p, m, s)
	}

	// Crowded: the threads wait for the home far longer than they run.
	// A calmer CPU (idle half the time) takes the home; with none, spread.
	period(0.05, 0.2, 1, 0.5)
	placed("crowded, a calm CPU: moved", h.cpus[0])
	period(0.05, 1, 1, 0.5)
	placed("crowded, no calm CPU: spread", -1)
	// Never pinned onto CPUs others keep busy, however quiet it is.
	for range 5 {
		period(0.01, 1, 1, 0)
	}
	placed("every CPU busy with others' work", -1)
	if p, m, s := h.Changes(); p != 2 || m != 1 || s != 2 {
		t.Fatalf("changes pinned %d moved %d spread %d; want 2 1 2", p, m, s)
	}
}

// Run samples the machine and applies what it decides: whatever the load
// of the machine (which decides whether it pins at all), a pinned process
// has every thread on its home, and stopping spreads them all.
func TestRunAppliesAndStops(t *testing.T) {
	all := needCPUs(t)
	h, stop := running(Config{Period: 20 * time.Millisecond, Hold: 50 * time.Millisecond})
	defer stop()
	// (a few periods: decisions made on real samples)
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if home := h.Current(); home >= 0 {
			eventually(t, "every thread on the home", func() bool { return h.Current() != home || allThreads(t, only(home)) })
		}
		time.Sleep(10 * time.Millisecond) // sampling what Run does over several periods
	}
	if !h.Enabled() {
		t.Fatal("Run gave up: sampling failed")
	}
	stop()
	if h.Current() != -1 || !allThreads(t, all) {
		t.Fatalf("stopping left threads pinned: home %d %v", h.Current(), threadSets(t))
	}
}

func TestOff(t *testing.T) {
	for _, c := range []struct {
		name string
		h    func(t *testing.T) *Home
	}{
		{"disabled", func(t *testing.T) *Home { return New(false, Config{}, quietLog()) }},
		{"nil", func(t *testing.T) *Home { return nil }},
		{"one CPU", func(t *testing.T) *Home {
			all := needCPUs(t)
			// New reads the calling thread's set: give this one a
			// single CPU for the call.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			on := only(firstCPU(all))
			if err := unix.SchedSetaffinity(0, &on); err != nil {
				t.Fatal(err)
			}
			defer unix.SchedSetaffinity(0, &all)
			return New(true, Config{}, quietLog())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.h(t)
			if h.Enabled() || h.Current() != -1 {
				t.Fatal("enabled")
			}
			ran := false
			h.Fork(func() { ran = true })
			if !ran {
				t.Fatal("Fork did not run the fork")
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			h.Run(ctx) // returns at once
		})
	}
}

// A thread left with a single CPU while the process is spread (made by a
// pinned thread during a spread's pass, say) still forks jobs with the
// whole set, and the next check gives it the whole set back.
func TestStragglerWhileSpread(t *testing.T) {
	all := needCPUs(t)
	h := New(true, Config{}, quietLog())
	defer h.doSpread("test over")
	first := firstCPU(all)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		on := only(first)
		if err := unix.SchedSetaffinity(0, &on); err != nil {
			t.Error(err)
			return
		}
		if got, err := forkedSet(h); err != nil || got != all {
			t.Errorf("child of a straggler has %d CPUs (%v); want %d", got.Count(), err, all.Count())
		}
		// (spread: the fork leaves the thread the whole set)
		if err := unix.SchedSetaffinity(0, &on); err != nil {
			t.Error(err)
			return
		}
		h.check()
		var mine unix.CPUSet
		if err := unix.SchedGetaffinity(0, &mine); err != nil || mine != all {
			t.Errorf("check left this thread with %d CPUs (%v)", mine.Count(), err)
		}
	}()
	<-done
}
