package proc

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
)

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
	cmd.Env = append(Unmarked(os.Environ()), env...)
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
		if p, ok := Lookup(zombie.Process.Pid); ok && p.Zombie {
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
	ticks, _ := StartTicks(p.Pid)
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
			if ticks, err := StartTicks(p.Pid); err == nil && ticks == p.StartTicks {
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
	Each(func(p Process) bool {
		if p.Pgid == pgid && !p.Zombie {
			out = append(out, p.Pid)
		}
		return true
	})
	return out
}
