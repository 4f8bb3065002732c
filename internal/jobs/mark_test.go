package jobs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestJobsCarryTheMark: with WithMark every job starts with its own id and
// the state's mark in its environment, once each, whatever it inherited or
// was given, in every environment mode.
func TestJobsCarryTheMark(t *testing.T) {
	t.Setenv(EnvJobID, "outer-job") // (the supervisor is itself some job)
	t.Setenv(EnvStateID, "outer-state")
	m := New(Config{}, nil, nil, WithMark("s1"))
	defer m.Close(context.Background())
	for _, args := range []protocol.SpawnArgs{
		{Argv: []string{"/usr/bin/env"}},
		{Argv: []string{"/usr/bin/env"}, Env: map[string]string{EnvJobID: "forged", "K": "v"}},
		{Argv: []string{"/usr/bin/env"}, EnvMode: protocol.EnvReplace, Env: map[string]string{EnvStateID: "forged"}},
	} {
		info, out := runJob(t, m, args)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := []string{EnvJobID + "=" + info.JobID, EnvStateID + "=s1"}
		for _, w := range want {
			if n := strings.Count("\n"+out, "\n"+strings.SplitN(w, "=", 2)[0]+"="); n != 1 || !slices.Contains(lines, w) {
				t.Errorf("env %v (mode %q): want %s once, got:\n%s", args.Env, args.EnvMode, w, out)
			}
		}
	}
	// Without a mark nothing is added (origin mode).
	m2 := New(Config{}, nil, nil)
	defer m2.Close(context.Background())
	if _, out := runJob(t, m2, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}}); !strings.Contains(out, EnvJobID+"=outer-job") {
		t.Errorf("without a mark the inherited environment is kept as it is:\n%s", out)
	}
}

func TestParseMark(t *testing.T) {
	for _, c := range []struct {
		env, job string
		ok       bool
	}{
		{"A=1\x00EXEC_SUPERVISOR_JOB_ID=j1\x00EXEC_SUPERVISOR_STATE_ID=s1\x00", "j1", true},
		{"EXEC_SUPERVISOR_STATE_ID=s1\x00EXEC_SUPERVISOR_JOB_ID=j2", "j2", true},
		{"EXEC_SUPERVISOR_JOB_ID=j1\x00EXEC_SUPERVISOR_STATE_ID=s2\x00", "", false},
		// The first value counts, as for getenv.
		{"EXEC_SUPERVISOR_STATE_ID=s2\x00EXEC_SUPERVISOR_JOB_ID=j1\x00EXEC_SUPERVISOR_STATE_ID=s1\x00", "", false},
		{"EXEC_SUPERVISOR_JOB_ID=\x00EXEC_SUPERVISOR_STATE_ID=s1\x00", "", false},
		{"EXEC_SUPERVISOR_STATE_ID=s1\x00", "", false},
		{"EXEC_SUPERVISOR_JOB_ID=" + strings.Repeat("x", 300) + "\x00EXEC_SUPERVISOR_STATE_ID=s1", "", false},
		{"EXEC_SUPERVISOR_JOB_ID j1\x00EXEC_SUPERVISOR_STATE_ID=s1", "", false},
		{"", "", false},
		{"\x00\x00=\x00", "", false},
	} {
		job, ok := parseMark([]byte(c.env), "s1")
		if job != c.job || ok != c.ok {
			t.Errorf("parseMark(%q) = %q, %v; want %q, %v", c.env, job, ok, c.job, c.ok)
		}
	}
}

// startMarked starts argv in a process group of its own with env added
// to this process's environment (and sys's credentials, if any), ended and
// waited for when the test ends.
func startMarked(t *testing.T, env []string, cred *syscall.Credential, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(unmarked(os.Environ()), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil { // (not waited for: its group is still its)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
	})
	return cmd
}

func markEnv(state, job string) []string {
	return []string{EnvJobID + "=" + job, EnvStateID + "=" + state}
}

// marked returns FindMarked's processes among pids, by pid.
func marked(state string, pids ...int) map[int]MarkedProcess {
	out := map[int]MarkedProcess{}
	found, err := FindMarked(state)
	if err != nil {
		panic(err)
	}
	for _, p := range found {
		if slices.Contains(pids, p.Pid) {
			out[p.Pid] = p
		}
	}
	return out
}

// TestFindMarked: processes carrying a state's mark are found, with their
// job id and group; those with another state's mark, another user's
// (or a set-user-id program's: another real uid), and zombies, are not.
// (A duplicated variable is TestParseMark's: os/exec keeps one; the
// cgroup scope is TestCgroupScope's.)
func TestFindMarked(t *testing.T) {
	state := fmt.Sprintf("find-%d-%d", os.Getpid(), time.Now().UnixNano())
	mine := startMarked(t, markEnv(state, "j1"), nil, "sleep", "300")
	other := startMarked(t, markEnv(state+"-other", "j2"), nil, "sleep", "300")
	zombie := startMarked(t, markEnv(state, "j4"), nil, "true")
	pids := []int{mine.Process.Pid, other.Process.Pid, zombie.Process.Pid}
	var stranger *exec.Cmd
	if os.Geteuid() == 0 {
		stranger = startMarked(t, markEnv(state, "j5"), &syscall.Credential{Uid: 65534, Gid: 65534}, "sleep", "300")
		pids = append(pids, stranger.Process.Pid)
	} else {
		t.Log("not root: the other-user case is not checked")
	}
	deadline := time.Now().Add(10 * time.Second)
	for { // (the zombie: true has exited, not yet waited for)
		if p, ok := LookupProcess(zombie.Process.Pid); ok && p.Zombie {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("true did not exit")
		}
		time.Sleep(5 * time.Millisecond) // nothing to wait on: a child's exit, not yet reaped
	}
	got := marked(state, pids...)
	if len(got) != 1 {
		t.Fatalf("found %+v, want only pid %d", got, mine.Process.Pid)
	}
	p := got[mine.Process.Pid]
	ticks, _ := ProcStartTicks(p.Pid)
	if p.JobID != "j1" || p.Pgid != p.Pid || p.StartTicks != ticks {
		t.Errorf("found %+v, want job j1 leading its group, start ticks %d", p, ticks)
	}
}

// TestCgroupScope: a process is taken in its cgroup's subtree only (in
// the root: in exactly its cgroups), or below a cgroup given.
func TestCgroupScope(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	if s, err := newCgroupScope(nil); err != nil || !s.holds(self) {
		t.Fatalf("this process is not in its own scope: %+v %v", s, err)
	}
	if !(cgroupScope{exact: string(b)}).holds(self) || (cgroupScope{exact: "0::/other\n"}).holds(self) {
		t.Error("the exact-file scope")
	}
	own, ok := cgroups.UnifiedPath(b)
	if !ok {
		t.Skip("no cgroup v2 here: the scope is the exact cgroup file")
	}
	if own == "/" {
		if s, _ := newCgroupScope(nil); s.exact != string(b) || len(s.under) != 0 {
			t.Errorf("in the root cgroup, the scope is %+v: want exactly this cgroup file", s)
		}
		t.Log("this process is in the root cgroup: only the exact-file scope is checked")
		return
	}
	for _, c := range []struct {
		under []string
		want  bool
	}{
		{[]string{own}, true},
		{[]string{"/elsewhere", path.Dir(own)}, path.Dir(own) != "/"},
		{[]string{"/elsewhere"}, false},
		{[]string{own + "x"}, false}, // (a sibling whose name starts with ours)
		{[]string{own + "/below"}, false},
		{[]string{"", "/"}, false}, // (the root is the whole machine)
	} {
		if got := (cgroupScope{under: c.under}).holds(self); got != c.want {
			t.Errorf("in %q, under %q: %v, want %v", own, c.under, got, c.want)
		}
	}
}

// TestTerminateMarked: found processes are ended as jobs are (SIGTERM to
// each and to the group each leads, SIGKILL after the grace period to what
// ignored it); a process gone and its pid's new owner are not signalled.
func TestTerminateMarked(t *testing.T) {
	state := fmt.Sprintf("term-%d-%d", os.Getpid(), time.Now().UnixNano()) // (no other run's)
	t.Cleanup(func() {                                                     // whatever carries this test's mark
		found, _ := FindMarked(state)
		for _, p := range found {
			if ticks, err := ProcStartTicks(p.Pid); err == nil && ticks == p.StartTicks {
				_ = syscall.Kill(p.Pid, syscall.SIGKILL)
			}
		}
	})
	polite := startMarked(t, markEnv(state, "a"), nil, "sh", "-c", "sleep 301 & wait")
	stubborn := startMarked(t, markEnv(state, "b"), nil, "sh", "-c", `trap "" TERM; sleep 302 & wait`)
	// A group whose found leader takes SIGTERM, with a member that carries
	// no mark and ignores it: the group is ended whole.
	unmarkedMember := startMarked(t, markEnv(state, "c"), nil, "sh", "-c", `env -u `+EnvJobID+` sh -c 'trap "" TERM; exec sleep 303' & wait`)
	// Each group: its shell and a sleep (exec'd: its environment and
	// signal dispositions are final).
	waitSleeping := func(pgid int) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			n := 0
			for _, pid := range groupPids(pgid) {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) == "sleep" {
					n++
				}
			}
			if n == 1 && len(groupPids(pgid)) == 2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("group %d: %v, want a shell and a sleep", pgid, groupPids(pgid))
			}
			time.Sleep(5 * time.Millisecond) // the shell starts its sleep: no event to wait on
		}
	}
	cmds := []*exec.Cmd{polite, stubborn, unmarkedMember}
	var ours []int
	for _, cmd := range cmds {
		waitSleeping(cmd.Process.Pid)
		ours = append(ours, groupPids(cmd.Process.Pid)...)
	}
	all, err := FindMarked(state)
	if err != nil {
		t.Fatal(err)
	}
	var found []MarkedProcess
	for _, p := range all {
		if slices.Contains(ours, p.Pid) {
			found = append(found, p)
		}
	}
	if len(found) != 5 || len(all) != 5 {
		t.Fatalf("found %+v, want the three shells and the two marked sleeps", all)
	}
	// A found process that is gone and whose pid is taken again is
	// not signalled: its start time differs.
	stale := found[0]
	stale.StartTicks--
	if ended, _, _ := TerminateMarked([]MarkedProcess{stale}, state, time.Second); len(ended) != 0 {
		t.Fatalf("a process with another start time was taken for the one found")
	}
	start := time.Now()
	// Alone: only its group's member ignoring SIGTERM is left to wait for.
	var c, others []MarkedProcess
	for _, p := range found {
		if p.JobID == "c" {
			c = append(c, p)
		} else {
			others = append(others, p)
		}
	}
	if ended, killed, left := TerminateMarked(c, state, 300*time.Millisecond); len(ended) != 1 || !killed || left {
		t.Errorf("the group with an unmarked member: ended %v, killed %v, left %v; want its shell, true, false", ended, killed, left)
	}
	ended, killed, left := TerminateMarked(others, state, 300*time.Millisecond)
	if len(ended) != 4 || !killed || left {
		t.Errorf("ended %v, killed %v, left %v; want 4, true, false (one group ignores SIGTERM)", ended, killed, left)
	}
	for _, cmd := range cmds {
		if pids := groupPids(cmd.Process.Pid); len(pids) > 0 {
			t.Errorf("group %d left: %v", cmd.Process.Pid, pids)
		}
	}
	_ = polite.Wait()
	if ws := polite.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGTERM {
		t.Errorf("the shell that takes SIGTERM ended with %v", polite.ProcessState)
	}
	_ = unmarkedMember.Wait()
	_ = stubborn.Wait()
	if ws := stubborn.ProcessState.Sys().(syscall.WaitStatus); ws.Signal() != syscall.SIGKILL {
		t.Errorf("the shell that ignores SIGTERM ended with %v", stubborn.ProcessState)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("took %v", d)
	}
}

// groupPids returns the live (not zombie) members of process group pgid.
func groupPids(pgid int) []int {
	var out []int
	EachProcess(func(p Process) bool {
		if p.Pgid == pgid && !p.Zombie {
			out = append(out, p.Pid)
		}
		return true
	})
	return out
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
	find := func(arg string, cond func(Process) bool) int {
		t.Helper()
		return findSleeping(t, arg, func(p Process) bool { return p.Sid == p.Pid && cond(p) })
	}
	adopted := func(p Process) bool { return p.PPid == os.Getpid() }
	child := func(arg string) int { return find(arg, adopted) }
	alive := func(pid int) bool { p, ok := LookupProcess(pid); return ok && !p.Zombie }
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
	info, err = m.Spawn(protocol.SpawnArgs{Shell: "setsid sleep 30" + tag + "3 & setsid sh -c 'trap \"\" TERM; exec sleep 30" + tag + "4' & env -u " + EnvJobID + " setsid sleep 30" + tag + "5 & read _ < " + fifo})
	if err != nil {
		t.Fatal(err)
	}
	any := func(Process) bool { return true }
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
	leader := findSleeping(t, b, func(p Process) bool { return p.Sid == p.Pid })
	member := findSleeping(t, a, func(p Process) bool { return p.Pgid == leader })
	release(t, fifo)
	j, _ := m.Get(info.JobID)
	<-j.Done()
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	sawHeld := false
	for {
		m.reapOrphans()
		lp, lok := LookupProcess(leader)
		mp, mok := LookupProcess(member)
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
			orphan := findSleeping(t, arg, func(p Process) bool { return p.Sid == p.Pid && p.PPid == os.Getpid() })
			ticks, _ := ProcStartTicks(orphan)
			ctx := context.Background()
			if c.hurry {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
			}
			start := time.Now()
			m.Close(ctx)
			if Identify(orphan, ticks, BootID()) == Ours {
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
func findSleeping(t *testing.T, arg string, cond func(Process) bool) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found []int
		EachProcess(func(p Process) bool {
			if !p.Zombie && cond(p) {
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.Pid)); string(b) == "sleep\x00"+arg+"\x00" {
					found = append(found, p.Pid)
				}
			}
			return true
		})
		if len(found) == 1 {
			pid := found[0]
			ticks, _ := ProcStartTicks(pid)
			t.Cleanup(func() {
				if Identify(pid, ticks, BootID()) == Ours {
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
