// Package cpuhome keeps the supervisor's own threads on one CPU, its
// home, while the supervisor is quiet, and spreads them over every CPU it
// may use as soon as it gets busy or its home gets crowded. Jobs never
// inherit the home: each is forked from a thread that holds the whole set
// for the fork.
//
// Why: a job started and waited for one at a time is a relay between
// threads (the request's reader, the forking thread, the child, the
// waiter, the reply's writer). Spread over CPUs, each hand-off wakes an
// idle CPU and runs on cold caches; on the virtual machine this was
// measured on (2 CPUs; waking an idle one cost 100-250 µs), that cost more
// than the supervisor's own work. Measured against os/exec in the same
// run, one at a time: +0.04 median (-0.02 to +0.12) with the exit event,
// +0.01 with waitMs (BenchmarkSpawnTrueBinary, several supervisors and
// the benchmark's client on 2 CPUs); 0.85x against 0.77x with one
// supervisor and one client alone. (Pinning the whole process with
// taskset, jobs included, did better still: 0.9x and more in some runs,
// because each child then started on its parent's CPU; jobs must not be
// confined, and a child inherits its parent thread's set, so that is not
// done.) A supervisor that needs more than a fraction of one CPU (many
// jobs printing at once) is spread, so the home never caps its throughput
// for long.
//
// Linux only (sched_setaffinity per thread). Go's runtime follows the
// threads' affinity for GOMAXPROCS unless GOMAXPROCS is set: 1 while
// pinned, the whole set's size once spread (it checks every second).
package cpuhome

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Config tunes the controller. The zero value of a field takes its
// default (see Defaults).
type Config struct {
	// Period is how often usage is sampled and the placement decided.
	Period time.Duration
	// Hold is the least time spent spread before pinning again, and
	// between two moves of the home.
	Hold time.Duration
	// Busy is the supervisor's CPU use (share of one CPU over a period)
	// from which it is spread.
	Busy float64
	// Quiet is the use below which it may be pinned.
	Quiet float64
	// Crowded is how long the threads may wait for the home CPU per unit
	// of CPU time they get (their run-queue wait over their use) before
	// the home is moved to a calmer CPU, or given up when there is none.
	// Measured on 2 CPUs: 1-1.5 one job at a time, 2-3 with 8 at a time
	// (the threads wait for each other), 5 with three CPU hogs on the
	// home (spawns through the supervisor then took 1.7 times as long).
	Crowded float64
	// CrowdedBusy stands in for Crowded where the kernel keeps no
	// run-queue statistics: the share of the home CPU everything else
	// used from which it is crowded.
	CrowdedBusy float64
}

// minWait is the least run-queue wait (share of a period) that counts as
// crowding: a process that hardly runs may wait many times its CPU time
// and lose nothing worth a move.
const minWait = 0.1

// Defaults are the values a zero Config field takes.
func Defaults() Config {
	return Config{Period: 500 * time.Millisecond, Hold: 10 * time.Second, Busy: 0.6, Quiet: 0.5, Crowded: 4, CrowdedBusy: 0.85}
}

func (c *Config) fill() {
	d := Defaults()
	if c.Period <= 0 {
		c.Period = d.Period
	}
	if c.Hold <= 0 {
		c.Hold = d.Hold
	}
	if c.Busy <= 0 {
		c.Busy = d.Busy
	}
	if c.Quiet <= 0 {
		c.Quiet = d.Quiet
	}
	if c.Crowded <= 0 {
		c.Crowded = d.Crowded
	}
	if c.CrowdedBusy <= 0 {
		c.CrowdedBusy = d.CrowdedBusy
	}
}

// Home is the placement of this process's threads. A nil Home, or one
// made disabled, never pins anything; its Fork just forks. Affinity is a
// property of the process: one Home per process (a second one, made while
// the first has pinned the threads, would take the home for the whole
// set; and only the Home that pinned a thread widens it for a fork).
type Home struct {
	cfg Config
	log *slog.Logger
	// all is the CPU set the process was started with: what threads get
	// when spread and what every job is forked with.
	all  unix.CPUSet
	cpus []int // the CPUs of all, ascending
	// placing is set when this Home may pin threads: its Fork then makes
	// sure of the forking thread's set.
	placing bool

	// mu guards forking and every change of the threads' sets. It is
	// never held across a fork.
	mu sync.Mutex
	// forking are the threads forking now, their set widened to all:
	// placement passes leave them alone (each sets itself back, under mu,
	// once its fork is done).
	forking map[int]bool
	home    atomic.Int32 // the CPU threads are pinned to, or -1: spread
	off     atomic.Bool  // never pin (disabled, or pinning failed)

	// counted changes, for metrics
	pinned, moved, spread atomic.Uint64
	forkSetFailed         atomic.Bool // (logged once)
}

// New returns the placement of this process, spread (nothing is pinned
// until Run finds the process quiet). enabled false, or a process that may
// use a single CPU, gives a Home that never pins.
func New(enabled bool, cfg Config, log *slog.Logger) *Home {
	cfg.fill()
	h := &Home{cfg: cfg, log: log, forking: map[int]bool{}}
	h.home.Store(-1)
	if !enabled {
		h.off.Store(true)
		return h
	}
	if err := unix.SchedGetaffinity(0, &h.all); err != nil {
		log.Warn("cpu home off: cannot read this process's CPU set", "err", err)
		h.off.Store(true)
		return h
	}
	for i := 0; i < len(h.all)*64; i++ {
		if h.all.IsSet(i) {
			h.cpus = append(h.cpus, i)
		}
	}
	if len(h.cpus) < 2 {
		h.off.Store(true) // (nothing to choose from)
		return h
	}
	h.placing = true
	return h
}

// Enabled reports whether the process may be pinned (not off, not
// confined to one CPU already).
func (h *Home) Enabled() bool { return h != nil && !h.off.Load() }

// Current returns the CPU the threads are pinned to, or -1 when spread.
func (h *Home) Current() int {
	if h == nil {
		return -1
	}
	return int(h.home.Load())
}

// Changes counts the placements made so far: pins (from spread), moves
// (from one home to another) and spreads.
func (h *Home) Changes() (pinned, moved, spread uint64) {
	if h == nil {
		return 0, 0, 0
	}
	return h.pinned.Load(), h.moved.Load(), h.spread.Load()
}

// target is the set threads should have now. Called with mu held.
func (h *Home) targetLocked() unix.CPUSet {
	if home := h.home.Load(); home >= 0 {
		return only(int(home))
	}
	return h.all
}

// only is the set of cpu alone.
func only(cpu int) unix.CPUSet {
	var set unix.CPUSet
	set.Set(cpu)
	return set
}

// Fork runs fork, which forks and execs a child on the calling goroutine,
// so that the child starts with the process's whole CPU set whatever the
// placement: the calling thread gets that set for the fork if it does not
// have it (a child inherits its parent thread's), placement passes leave
// it alone meanwhile, and it takes the placement's set again afterwards.
// Forks do not wait for each other, nor for a placement pass longer than
// that pass's few system calls.
func (h *Home) Fork(fork func()) {
	if h == nil || !h.placing {
		fork()
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	h.mu.Lock()
	h.forking[tid] = true
	h.mu.Unlock()
	defer func() { // (also if fork panics)
		h.mu.Lock()
		delete(h.forking, tid)
		if set := h.targetLocked(); set != h.all {
			_ = unix.SchedSetaffinity(0, &set) // (a miss is fixed by Run's next pass)
		}
		h.mu.Unlock()
	}()
	var cur unix.CPUSet
	if unix.SchedGetaffinity(0, &cur) != nil || cur != h.all {
		if err := unix.SchedSetaffinity(0, &h.all); err != nil {
			// The set is not ours to give any more (the cpuset changed):
			// the widest the kernel allows then, and no more pinning.
			var wide unix.CPUSet
			for i := 0; i < len(wide)*64; i++ {
				wide.Set(i)
			}
			err2 := unix.SchedSetaffinity(0, &wide)
			h.off.Store(true)
			if !h.forkSetFailed.Swap(true) {
				h.log.Error("cpu home off: a job could not be forked with this process's CPU set", "err", err, "widest", err2)
			}
		}
	}
	fork()
}

// Run decides the placement every Period until ctx is done, then spreads
// the threads. It returns at once for a Home that never pins.
func (h *Home) Run(ctx context.Context) {
	if !h.Enabled() {
		return
	}
	defer h.doSpread("stopping")
	t := time.NewTicker(h.cfg.Period)
	defer t.Stop()
	prev, err := h.sample()
	if err != nil {
		h.giveUp("cannot sample CPU use", err)
		return
	}
	var changed time.Time // last pin, move or spread (zero: none yet)
	quiet := 0            // quiet periods in a row, while spread
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h.off.Load() {
			return
		}
		cur, err := h.sample()
		if err != nil {
			// (a CPU taken offline is no longer listed, for one)
			h.giveUp("cannot sample CPU use", err)
			return
		}
		h.decide(window(prev, cur), &changed, &quiet)
		prev = cur
	}
}

// giveUp turns pinning off for good (Run then spreads the threads).
func (h *Home) giveUp(why string, err error) {
	if !h.off.Swap(true) {
		h.log.Warn("cpu home off: "+why, "err", err)
	}
}

// use is one period's CPU use: the process's own (share of one CPU) and
// each CPU's busy share (everything it ran, this process included), by
// position in Home.cpus.
type use struct {
	self float64
	busy []float64
	// wait is the time this process's threads spent ready to run but
	// waiting for a CPU, as a share of the period (summed over threads);
	// -1 where the kernel does not say.
	wait float64
}

// decide pins, moves or spreads the threads after a period of use u, and
// otherwise makes sure every thread has the placement's set.
func (h *Home) decide(u use, changed *time.Time, quiet *int) {
	now := time.Now()
	home := int(h.home.Load())
	held := !changed.IsZero() && now.Sub(*changed) < h.cfg.Hold
	if home < 0 {
		if u.self < h.cfg.Quiet {
			*quiet++
		} else {
			*quiet = 0
		}
		// (two quiet periods in a row: one is a lull as often as not)
		// (not onto a CPU others keep busy: the home would be crowded)
		if !held && *quiet >= 2 {
			if c, b := h.calmest(u, -1); c >= 0 && b-u.self < 0.9 && h.pin(c, "quiet", u) {
				*changed = now
				return
			}
		}
		h.check()
		return
	}
	*quiet = 0
	if u.self >= h.cfg.Busy {
		h.doSpread("busy", "selfCPU", round(u.self))
		*changed = now
		return
	}
	others := u.busy[h.index(home)] - u.self
	crowded := u.wait >= minWait && u.wait >= h.cfg.Crowded*u.self
	if u.wait < 0 {
		crowded = others >= h.cfg.CrowdedBusy
	}
	if crowded {
		// A calmer CPU: one that was idle half the time at least.
		if c, b := h.calmest(u, home); !held && c >= 0 && b < 0.5 {
			if h.pin(c, "home crowded", u) {
				*changed = now
			}
			return
		}
		h.doSpread("home crowded", "homeCPU", home, "wait", round(u.wait), "selfCPU", round(u.self), "othersOnHome", round(others))
		*changed = now
		return
	}
	h.check()
}

func round(f float64) float64 { return float64(int(f*100+0.5)) / 100 }

// calmest returns the least busy CPU other than except, and its use.
func (h *Home) calmest(u use, except int) (int, float64) {
	best, bestUse := -1, 2.0
	for i, c := range h.cpus {
		if c != except && u.busy[i] < bestUse {
			best, bestUse = c, u.busy[i]
		}
	}
	return best, bestUse
}

func (h *Home) index(cpu int) int {
	for i, c := range h.cpus {
		if c == cpu {
			return i
		}
	}
	return 0
}

// pin moves every thread to cpu (from spread or from another home). It
// reports false, spreading the threads and turning pinning off, when the
// kernel refuses.
func (h *Home) pin(cpu int, why string, u use) bool {
	h.mu.Lock()
	was := h.home.Load()
	err := h.applyLocked(only(cpu))
	var err2 error
	if err != nil {
		h.off.Store(true)
		err2 = h.applyLocked(h.all)
		if was >= 0 {
			h.spread.Add(1)
			h.home.Store(-1)
		}
	} else {
		// (counted before it shows: whoever sees the home sees it counted)
		if was < 0 {
			h.pinned.Add(1)
		} else {
			h.moved.Add(1)
		}
		h.home.Store(int32(cpu))
	}
	h.mu.Unlock()
	if err != nil {
		h.log.Warn("cpu home off: cannot pin this process's threads", "cpu", cpu, "err", err, "spreading", err2)
		return false
	}
	h.log.Debug("cpu home: threads pinned", "cpu", cpu, "from", was, "why", why, "selfCPU", round(u.self), "wait", round(u.wait))
	return true
}

// doSpread gives every thread the whole set back.
func (h *Home) doSpread(why string, attrs ...any) {
	h.mu.Lock()
	err := h.applyLocked(h.all) // (when spread already: stragglers)
	was := h.home.Load()
	if was >= 0 {
		h.spread.Add(1)
		h.home.Store(-1)
	}
	if err != nil {
		h.off.Store(true)
	}
	h.mu.Unlock()
	if err != nil {
		h.log.Warn("cpu home off: cannot spread this process's threads", "err", err)
	}
	if was >= 0 {
		h.log.Debug("cpu home: threads spread", append([]any{"why", why}, attrs...)...)
	}
}

// check gives the placement's set to the threads that do not have it
// (made meanwhile by a thread of the previous placement, or left behind
// by a fork), and turns pinning off if the kernel refuses.
func (h *Home) check() {
	h.mu.Lock()
	err := h.applyLocked(h.targetLocked())
	h.mu.Unlock()
	if err != nil {
		h.giveUp("cannot keep this process's threads placed", err)
	}
}

// applyLocked gives every thread but the forking ones set, pass after
// pass until one finds nothing to change (a thread made during a pass
// copies its maker's old set), at most 4. Threads that end meanwhile are
// skipped; any other refusal is returned.
func (h *Home) applyLocked(set unix.CPUSet) error {
	for pass := 0; pass < 4; pass++ {
		tids, err := threads()
		if err != nil {
			return err
		}
		changed := false
		for _, tid := range tids {
			var got unix.CPUSet
			if h.forking[tid] || unix.SchedGetaffinity(tid, &got) == nil && got == set {
				continue
			}
			changed = true
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("thread %d: %w", tid, err)
			}
		}
		if !changed {
			return nil
		}
	}
	return nil
}

// threads lists this process's thread ids.
func threads() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, tid)
		}
	}
	return out, nil
}

// threadsWait sums the run-queue wait of this process's threads, from
// /proc/self/task/*/schedstat (time on CPU, time waiting for it, slices;
// -1 where the kernel keeps none: no file, or zeros, as kernels without
// scheduler statistics or delay accounting show).
func threadsWait() time.Duration {
	tids, err := threads()
	if err != nil {
		return -1
	}
	var sum, ran time.Duration
	buf := make([]byte, 128)
	for _, tid := range tids {
		fd, err := unix.Open("/proc/self/task/"+strconv.Itoa(tid)+"/schedstat", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		n, _ := unix.Read(fd, buf)
		unix.Close(fd)
		if n <= 0 {
			continue
		}
		f := bytes.Fields(buf[:n])
		if len(f) >= 2 {
			r, err1 := strconv.ParseUint(string(f[0]), 10, 64)
			w, err2 := strconv.ParseUint(string(f[1]), 10, 64)
			if err1 == nil && err2 == nil {
				ran += time.Duration(r)
				sum += time.Duration(w)
			}
		}
	}
	if ran == 0 { // (this process has run: the kernel does not say)
		return -1
	}
	return sum
}

// sampleAt is the cumulative counters at one time.
type sampleAt struct {
	at    time.Time
	self  time.Duration // CPU time of this process (all threads)
	wait  time.Duration // run-queue wait of its threads (live ones); -1: unknown
	busy  []uint64      // per CPU of Home.cpus: ticks not idle
	total []uint64      // per CPU: all ticks
}

func (h *Home) sample() (sampleAt, error) {
	s := sampleAt{at: time.Now(), busy: make([]uint64, len(h.cpus)), total: make([]uint64, len(h.cpus))}
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return s, fmt.Errorf("getrusage: %w", err)
	}
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	s.wait = threadsWait()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		busy, total, cpu, ok := parseCPULine(sc.Bytes())
		if !ok {
			continue
		}
		for i, c := range h.cpus {
			if c == cpu {
				s.busy[i], s.total[i] = busy, total
				found++
			}
		}
	}
	if found != len(h.cpus) {
		return s, fmt.Errorf("/proc/stat: %d of %d CPUs listed", found, len(h.cpus))
	}
	return s, nil
}

// parseCPULine reads a "cpuN user nice system idle iowait irq softirq
// steal ..." line of /proc/stat: ticks busy (all but idle and iowait;
// steal counts as busy: the CPU was not ours) and in all.
func parseCPULine(line []byte) (busy, total uint64, cpu int, ok bool) {
	f := bytes.Fields(line)
	if len(f) < 5 || !bytes.HasPrefix(f[0], []byte("cpu")) || len(f[0]) == 3 {
		return 0, 0, 0, false
	}
	cpu, err := strconv.Atoi(string(f[0][3:]))
	if err != nil {
		return 0, 0, 0, false
	}
	var idle uint64
	for i, v := range f[1:] {
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		total += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return total - idle, total, cpu, true
}

// window turns two samples into a period's use.
func window(a, b sampleAt) use {
	u := use{busy: make([]float64, len(a.busy))}
	if wall := b.at.Sub(a.at); wall > 0 {
		u.self = float64(b.self-a.self) / float64(wall)
		switch {
		case a.wait < 0 || b.wait < 0:
			u.wait = -1
		case b.wait > a.wait: // (a thread that ended takes its part away)
			u.wait = float64(b.wait-a.wait) / float64(wall)
		}
	}
	for i := range a.busy {
		// (counters that went back, as steal time has on some
		// hypervisors, say nothing: 0)
		if b.total[i] > a.total[i] && b.busy[i] >= a.busy[i] {
			u.busy[i] = min(float64(b.busy[i]-a.busy[i])/float64(b.total[i]-a.total[i]), 1)
		}
	}
	return u
}
