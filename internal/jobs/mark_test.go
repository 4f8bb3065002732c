package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestJobsCarryTheMark: with WithMark every job starts with its own id and
// the state's mark in its environment, once each, whatever it inherited or
// was given, in every environment mode.
func TestJobsCarryTheMark(t *testing.T) {
	t.Setenv(proc.EnvJobID, "outer-job") // (the supervisor is itself some job)
	t.Setenv(proc.EnvStateID, "outer-state")
	m := New(Config{}, nil, nil, WithMark("s1"))
	defer m.Close(context.Background())
	for _, args := range []protocol.SpawnArgs{
		{Argv: []string{"/usr/bin/env"}},
		{Argv: []string{"/usr/bin/env"}, Env: map[string]string{proc.EnvJobID: "forged", "K": "v"}},
		{Argv: []string{"/usr/bin/env"}, EnvMode: protocol.EnvReplace, Env: map[string]string{proc.EnvStateID: "forged"}},
	} {
		info, out := runJob(t, m, args)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := []string{proc.EnvJobID + "=" + info.JobID, proc.EnvStateID + "=s1"}
		for _, w := range want {
			if n := strings.Count("\n"+out, "\n"+strings.SplitN(w, "=", 2)[0]+"="); n != 1 || !slices.Contains(lines, w) {
				t.Errorf("env %v (mode %q): want %s once, got:\n%s", args.Env, args.EnvMode, w, out)
			}
		}
	}
	// Without a mark nothing is added (origin mode).
	m2 := New(Config{}, nil, nil)
	defer m2.Close(context.Background())
	if _, out := runJob(t, m2, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}}); !strings.Contains(out, proc.EnvJobID+"=outer-job") {
		t.Errorf("without a mark the inherited environment is kept as it is:\n%s", out)
	}
}

// TestOrphansOfFinishedJobsEnded: without cgroups, a process a job left
// outside its group, adopted by the subreaper, is ended once its job has
// finished (SIGTERM, then SIGKILL after the grace period), found by the
// mark in its environment; while its job runs it is left alone, and so is
// one without a mark.
func TestOrphansOfFinishedJobsEnded(t *testing.T) {
	m, fifo := orphanManager(t, 300*time.Millisecond)
	tag := strconv.FormatInt(time.Now().UnixNano()%1000000, 10)
	// The process running sleep <arg> that left its job's group (it leads
	// a session of its own), with cond.
	find := func(arg string, cond func(proc.Process) bool) int {
		t.Helper()
		return findSleeping(t, arg, func(p proc.Process) bool { return p.Sid == p.Pid && cond(p) })
	}
	adopted := func(p proc.Process) bool { return p.PPid == os.Getpid() }
	child := func(arg string) int { return find(arg, adopted) }
	alive := func(pid int) bool { p, ok := proc.Lookup(pid); return ok && !p.Zombie }
	waitEnded := func(pid int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("orphan %d of a finished job still running", pid)
			}
			m.reapOrphans()                   // (the reaper's pass, without waiting for its tick)
			time.Sleep(10 * time.Millisecond) // its end: no event to wait on for a child the reaper may reap
		}
	}

	// A running job's orphan is left alone; once the job ends, it is ended.
	info, err := m.Spawn(protocol.SpawnArgs{Shell: "(setsid sleep 30" + tag + "1 &); exec sleep 30" + tag + "2"})
	if err != nil {
		t.Fatal(err)
	}
	running := child("30" + tag + "1")
	m.reapOrphans()
	m.reapOrphans()
	if !alive(running) {
		t.Fatal("the orphan of a running job was ended")
	}
	j, err := m.Get(info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Kill(protocol.ReasonManualCancel, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-j.Done()
	waitEnded(running)

	// A finished job's orphans: one takes SIGTERM, one ignores it (SIGKILL
	// after the grace period); one without a mark is left alone.
	// (The job's shell exits once they have left its group, which it would
	// otherwise end with it; they are found before the job ends: the
	// reaper may end them right after.)
	info, err = m.Spawn(protocol.SpawnArgs{Shell: "setsid sleep 30" + tag + "3 & setsid sh -c 'trap \"\" TERM; exec sleep 30" + tag + "4' & env -u " + proc.EnvJobID + " setsid sleep 30" + tag + "5 & read _ < " + fifo})
	if err != nil {
		t.Fatal(err)
	}
	any := func(proc.Process) bool { return true }
	polite, stubborn, unmarked := find("30"+tag+"3", any), find("30"+tag+"4", any), find("30"+tag+"5", any)
	release(t, fifo)
	child("30" + tag + "5") // (adopted once the shell exited: the reaper sees it)
	if j, err = m.Get(info.JobID); err != nil {
		t.Fatal(err)
	}
	<-j.Done()
	waitEnded(polite)
	waitEnded(stubborn)
	m.reapOrphans()
	if !alive(unmarked) {
		t.Error("an orphan without a mark was ended")
	}
	if n := m.OrphansEnded(); n != 3 {
		t.Errorf("OrphansEnded = %d, want 3", n)
	}
}

// TestOrphanGroupHeld: a finished job's orphan that leads a group whose
// other member ignores SIGTERM is kept unreaped (a zombie: its group's
// number stays its own) until the grace period ends, then its group gets
// SIGKILL and it is reaped.
func TestOrphanGroupHeld(t *testing.T) {
	m, fifo := orphanManager(t, 500*time.Millisecond)
	a, b := sleepArg(), sleepArg()
	info, err := m.Spawn(protocol.SpawnArgs{Shell: "setsid sh -c '(trap \"\" TERM; exec sleep " + a + ") & exec sleep " + b + "' & read _ < " + fifo})
	if err != nil {
		t.Fatal(err)
	}
	leader := findSleeping(t, b, func(p proc.Process) bool { return p.Sid == p.Pid })
	member := findSleeping(t, a, func(p proc.Process) bool { return p.Pgid == leader })
	release(t, fifo)
	j, _ := m.Get(info.JobID)
	<-j.Done()
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	sawHeld := false
	for {
		m.reapOrphans()
		lp, lok := proc.Lookup(leader)
		mp, mok := proc.Lookup(member)
		memberAlive := mok && !mp.Zombie
		if lok && lp.Zombie && memberAlive {
			sawHeld = true
			if time.Since(start) > 5*time.Second {
				t.Fatal("held past the grace period")
			}
		}
		if lok && !lp.Zombie && time.Since(start) > 5*time.Second {
			t.Fatal("the orphan was not ended")
		}
		if !lok && !memberAlive {
			break
		}
		if !lok && memberAlive && time.Since(start) < 500*time.Millisecond {
			// (after the grace period its group got SIGKILL first: the
			// member may still be dying)
			t.Fatal("the group's leader was reaped within the grace period while its group lived on (its number could be reused)")
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader %v %+v, member %v %+v", lok, lp, mok, mp)
		}
		time.Sleep(10 * time.Millisecond) // the processes' ends: no event to wait on here
	}
	if !sawHeld {
		t.Error("the leader was never seen held as a zombie while its group lived")
	}
}

// TestOrphansEndedAtClose: Close ends what finished jobs left (the jobs it
// ends itself included), waiting out the grace period for one that
// ignores SIGTERM; with Close's context done, at once with SIGKILL; and
// one whose job's grace runs past the Manager's gets SIGKILL when the
// Manager's has passed.
func TestOrphansEndedAtClose(t *testing.T) {
	for _, c := range []struct {
		name           string
		grace, jobWait time.Duration
		hurry          bool
	}{
		{"grace", 300 * time.Millisecond, 0, false},
		{"hurry", time.Minute, 0, true},
		{"job-grace-longer", 300 * time.Millisecond, time.Minute, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, _ := orphanManager(t, c.grace)
			arg := sleepArg()
			// (adopted while its job runs: the subshell that started it exits)
			if _, err := m.Spawn(protocol.SpawnArgs{Shell: "(setsid sh -c 'trap \"\" TERM; exec sleep " + arg + "' &); exec sleep " + sleepArg(), GraceMs: c.jobWait.Milliseconds()}); err != nil {
				t.Fatal(err)
			}
			orphan := findSleeping(t, arg, func(p proc.Process) bool { return p.Sid == p.Pid && p.PPid == os.Getpid() })
			ticks, _ := proc.StartTicks(orphan)
			ctx := context.Background()
			if c.hurry {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
			}
			start := time.Now()
			m.Close(ctx)
			if proc.Identify(orphan, ticks, proc.BootID()) == proc.Ours {
				t.Errorf("the job's orphan outlived Close")
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("Close took %v", d)
			}
			if m.OrphansLeft() != 0 {
				t.Errorf("OrphansLeft = %d", m.OrphansLeft())
			}
		})
	}
}

// sleepArg returns an argument for sleep that no other process has (a
// test finds its processes by their command line).
func sleepArg() string {
	return fmt.Sprintf("30%d", 100000000+time.Now().UnixNano()%900000000)
}

// orphanManager returns a Manager with a mark, without cgroups, as child
// subreaper (this test process, for the test), closed and the subreaper
// turned off when the test ends; and a FIFO its jobs' shells can wait on
// (see release).
func orphanManager(t *testing.T, grace time.Duration) (*Manager, string) {
	t.Helper()
	m := New(Config{Grace: grace}, nil, nil, WithMark(fmt.Sprintf("orphans-%d-%d", os.Getpid(), time.Now().UnixNano())))
	if err := m.EnableSubreaper(); err != nil {
		m.Close(context.Background())
		t.Skipf("cannot be a child subreaper here: %v", err)
	}
	t.Cleanup(func() {
		m.Close(context.Background())
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	})
	fifo := filepath.Join(t.TempDir(), "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return m, fifo
}

// release lets a job's shell waiting on fifo go on.
func release(t *testing.T, fifo string) {
	t.Helper()
	if err := os.WriteFile(fifo, []byte("\n"), 0); err != nil {
		t.Fatal(err)
	}
}

// findSleeping returns the process running "sleep <arg>" for which cond
// holds, waiting for it (10 s at most), and SIGKILLs it when the test ends
// if it is still that process.
func findSleeping(t *testing.T, arg string, cond func(proc.Process) bool) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found []int
		proc.Each(func(p proc.Process) bool {
			if !p.Zombie && cond(p) {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.Pid)); string(b) == "sleep\x00"+arg+"\x00" {
					found = append(found, p.Pid)
				}
			}
			return true
		})
		if len(found) == 1 {
			pid := found[0]
			ticks, _ := proc.StartTicks(pid)
			t.Cleanup(func() {
				if proc.Identify(pid, ticks, proc.BootID()) == proc.Ours {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process running sleep %s as wanted: %v", arg, found)
		}
		time.Sleep(5 * time.Millisecond) // forks, setsid and reparenting have no event to wait on
	}
}
