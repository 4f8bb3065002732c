package jobs

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// runJob spawns args on m, waits for the job's end and returns its info
// and output (stdout then stderr).
func runJob(t *testing.T, m *Manager, args protocol.SpawnArgs) (protocol.JobInfo, string) {
	t.Helper()
	info, err := m.Spawn(args)
	if err != nil {
		t.Fatalf("spawn %v: %v", args.Argv, err)
	}
	j, err := m.Get(info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("job %v did not end", args.Argv)
	}
	res, err := j.Poll(0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, c := range res.Chunks {
		out.Write(c.Data)
	}
	return j.Info(), out.String()
}

// TestExitStatusAllWaitPaths: exit codes and deaths by signal come out
// the same whether the process is waited for with its output by runLoop,
// alone through its pidfd by a waiter (as a terminal's job is), or by
// wait4 (kernels without usable pidfds).
func TestExitStatusAllWaitPaths(t *testing.T) {
	for _, path := range []string{"runloop", "waiter", "wait4"} {
		t.Run(path, func(t *testing.T) {
			if path != "wait4" && !pidfdsWork() {
				t.Skip("this kernel has no usable pidfds (needs Linux 5.4)")
			}
			m := New(Config{MaxJobs: 10}, nil, nil)
			defer m.Close(context.Background())
			m.pidfds = path != "wait4"
			m.noRunLoop = path == "waiter"
			for _, c := range []struct {
				shell  string
				code   int
				signal string
			}{
				{"exit 0", 0, ""}, {"exit 3", 3, ""}, {"exit 255", 255, ""},
				{"kill -TERM $$", -1, "SIGTERM"}, {"kill -KILL $$", -1, "SIGKILL"},
				// SIGQUIT and SIGABRT may dump core (si_code CLD_DUMPED).
				{"ulimit -c 0; kill -QUIT $$", -1, "SIGQUIT"}, {"kill -ABRT $$", -1, "SIGABRT"},
			} {
				info, _ := runJob(t, m, protocol.SpawnArgs{Shell: c.shell})
				switch {
				case c.signal != "" && (info.Signal != c.signal || info.Reason != protocol.ReasonSignal || info.ExitCode != nil):
					t.Errorf("%q: reason %s signal %q exit %v, want signal %s", c.shell, info.Reason, info.Signal, info.ExitCode, c.signal)
				case c.signal == "" && (info.ExitCode == nil || *info.ExitCode != c.code || info.Reason != protocol.ReasonExit):
					t.Errorf("%q: reason %s exit %v, want %d", c.shell, info.Reason, info.ExitCode, c.code)
				}
			}
		})
	}
}

// TestOutputAllReadPaths checks that output and exit come out the same
// whichever way a run is read and waited for: one loop for its pipes and
// its pidfd (runLoop), readers in the netpoller and a waiter (as a
// terminal's job is), runLoop handing the pipes to readers at once (its
// epoll instance could not be made), wait4 (no pidfds). Covered: both streams, more
// than a pipe holds, a process that closes its output and goes on, and
// output that arrives after the leader exited (from a process that left
// the group: runLoop hands the pipe to a reader).
func TestOutputAllReadPaths(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("needs setsid(1) (util-linux)")
	}
	for _, path := range []string{"runloop", "readers", "no-epoll", "wait4"} {
		t.Run(path, func(t *testing.T) {
			if path != "wait4" && !pidfdsWork() {
				t.Skip("this kernel has no usable pidfds (needs Linux 5.4)")
			}
			m := New(Config{MaxJobs: 10, DrainTimeout: 20 * time.Second}, nil, nil)
			defer m.Close(context.Background())
			m.pidfds = path != "wait4"
			m.noRunLoop = path == "readers"
			if path == "no-epoll" {
				m.pollSetErr = errors.New("test: no epoll instance")
			}
			big := strings.Repeat("a", 300_000)
			// (the leader waits until its setsid'd child has left the group:
			// a child still in it when the leader's end is handled is
			// cleared with the group, by design)
			left := filepath.Join(t.TempDir(), "left")
			for _, c := range []struct {
				shell          string
				stdout, stderr string
				code           int
			}{
				{"printf out; printf err >&2; exit 4", "out", "err", 4},
				{"head -c 300000 /dev/zero | tr '\\0' a; head -c 100000 /dev/zero | tr '\\0' b >&2", big, strings.Repeat("b", 100_000), 0},
				{"echo early; exec >&- 2>&-; sleep 0.2; exit 5", "early\n", "", 5},
				{"setsid sh -c ': > " + left + "; sleep 0.3; echo late' & while [ ! -e " + left + " ]; do sleep 0.01; done; echo early", "early\nlate\n", "", 0},
			} {
				info, _ := runJob(t, m, protocol.SpawnArgs{Shell: c.shell})
				j, err := m.Get(info.JobID)
				if err != nil {
					t.Fatal(err)
				}
				res, err := j.Poll(0, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				var got [2]strings.Builder
				for _, ch := range res.Chunks {
					got[map[protocol.Stream]int{protocol.Stdout: 0, protocol.Stderr: 1}[ch.Stream]].Write(ch.Data)
				}
				if got[0].String() != c.stdout || got[1].String() != c.stderr {
					t.Errorf("%.40q: stdout %d bytes %.20q, stderr %d bytes %.20q; want %d %.20q, %d %.20q", c.shell,
						got[0].Len(), got[0].String(), got[1].Len(), got[1].String(), len(c.stdout), c.stdout, len(c.stderr), c.stderr)
				}
				if info.ExitCode == nil || *info.ExitCode != c.code || info.Reason != protocol.ReasonExit {
					t.Errorf("%.40q: reason %s exit %v, want exit %d", c.shell, info.Reason, info.ExitCode, c.code)
				}
			}
		})
	}
}

// TestFloodingDescendantDoesNotHoldTheExit: a process of the group that
// keeps the output pipe full after the leader exited (here the output path
// is slowed down, standing in for a busy supervisor) neither keeps the
// leader from being reaped nor the rest of the group from being ended: the
// job ends with the leader's status, the flooder gone, on every path.
func TestFloodingDescendantDoesNotHoldTheExit(t *testing.T) {
	if _, err := exec.LookPath("yes"); err != nil {
		t.Skip("needs yes(1) (coreutils)")
	}
	for _, path := range []string{"runloop", "readers"} {
		t.Run(path, func(t *testing.T) {
			if !pidfdsWork() {
				t.Skip("this kernel has no usable pidfds (needs Linux 5.4)")
			}
			slow := WithHooks(Hooks{OutputBytes: func(protocol.Stream, int) { time.Sleep(10 * time.Millisecond) }})
			m := New(Config{MaxJobs: 10, Grace: 2 * time.Second}, nil, nil, slow)
			defer m.Close(context.Background())
			m.noRunLoop = path == "readers"
			info, err := m.Spawn(protocol.SpawnArgs{Shell: "yes & sleep 0.3; exit 3"})
			if err != nil {
				t.Fatal(err)
			}
			j, err := m.Get(info.JobID)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-j.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("job still %s 10 s after its leader exited (%d bytes of output read)", j.Info().State, j.Info().StdoutBytes)
			}
			got := j.Info()
			if got.ExitCode == nil || *got.ExitCode != 3 || got.Reason != protocol.ReasonExit {
				t.Errorf("reason %s exit %v, want exit 3", got.Reason, got.ExitCode)
			}
			if proc.GroupAlive(info.Pid) {
				t.Errorf("process group %d still has members after the job ended", info.Pid)
			}
		})
	}
}

// TestMergedStreamsKeepReadOrder: with a merge window, output is flushed
// per stream, oldest pending first: a job that prints its stdout lines and
// then a stderr line reads back in that order even when both merge
// windows end at the same moment (their timers race).
func TestMergedStreamsKeepReadOrder(t *testing.T) {
	m := New(Config{MaxJobs: 10, MergeInterval: 20 * time.Millisecond}, nil, nil)
	defer m.Close(context.Background())
	for run := range 20 {
		_, out := runJob(t, m, protocol.SpawnArgs{Shell: `i=0; while [ $i -lt 50 ]; do echo "line $i"; i=$((i+1)); done; echo crash >&2; sleep 0.1`})
		if !strings.HasSuffix(out, "line 49\ncrash\n") {
			t.Fatalf("run %d: output ends %q; want the stdout lines, then crash", run, out[max(0, len(out)-40):])
		}
	}
}

// TestChildStatus decodes siginfo_t as the kernel fills it for each
// si_code of SIGCHLD, and an empty one (no child exited yet).
func TestChildStatus(t *testing.T) {
	off := 12
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	info := func(code, pid, status int32) *[128]byte {
		var b [128]byte
		binary.NativeEndian.PutUint32(b[0:], uint32(syscall.SIGCHLD))
		binary.NativeEndian.PutUint32(b[8:], uint32(code))
		binary.NativeEndian.PutUint32(b[off:], uint32(pid))
		binary.NativeEndian.PutUint32(b[off+8:], uint32(status))
		return &b
	}
	if _, exited := childStatus(&[128]byte{}); exited {
		t.Fatal("an empty siginfo reads as an exit")
	}
	ws, ok := childStatus(info(1, 42, 7)) // CLD_EXITED
	if !ok || !ws.Exited() || ws.ExitStatus() != 7 {
		t.Fatalf("exited 7: %v %v", ws, ok)
	}
	ws, ok = childStatus(info(2, 42, int32(syscall.SIGTERM))) // CLD_KILLED
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM || ws.CoreDump() {
		t.Fatalf("killed: %v %v", ws, ok)
	}
	ws, ok = childStatus(info(3, 42, int32(syscall.SIGSEGV))) // CLD_DUMPED
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGSEGV || !ws.CoreDump() {
		t.Fatalf("dumped: %v %v", ws, ok)
	}
}

// TestEnvironment: "replace" gives the job exactly its env (nothing of
// the supervisor's); "inherit" overrides inherited values; and the
// variables the supervisor sets itself (NOTIFY_SOCKET, TERM) replace
// inherited ones instead of appearing twice (a program reads the first).
func TestEnvironment(t *testing.T) {
	m := New(Config{MaxJobs: 10}, nil, nil, WithNotifyDir(t.TempDir()))
	defer m.Close(context.Background())
	m.environ = []string{"PATH=" + os.Getenv("PATH"), "KEEP=1", "OVER=old", "NOTIFY_SOCKET=/run/systemd/notify", "TERM=dumb"}
	lines := func(out string) []string {
		ls := strings.Split(strings.TrimSpace(out), "\n")
		slices.Sort(ls)
		return ls
	}
	_, out := runJob(t, m, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}, EnvMode: protocol.EnvReplace})
	if strings.TrimSpace(out) != "" {
		t.Fatalf("replace with no env: the job saw %q", out)
	}
	_, out = runJob(t, m, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}, EnvMode: protocol.EnvReplace, Env: map[string]string{"A": "1"}})
	if got := lines(out); !slices.Equal(got, []string{"A=1"}) {
		t.Fatalf("replace: %q", got)
	}
	_, out = runJob(t, m, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}, Env: map[string]string{"OVER": "new"}})
	if got := lines(out); !slices.Contains(got, "KEEP=1") || !slices.Contains(got, "OVER=new") || slices.Contains(got, "OVER=old") {
		t.Fatalf("inherit: %q", got)
	}
	_, out = runJob(t, m, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}, Notify: true})
	var notify []string
	for _, l := range lines(out) {
		if strings.HasPrefix(l, "NOTIFY_SOCKET=") {
			notify = append(notify, l)
		}
	}
	if len(notify) != 1 || notify[0] == "NOTIFY_SOCKET=/run/systemd/notify" {
		t.Fatalf("notify job: NOTIFY_SOCKET lines %q, want exactly the job's own", notify)
	}
	_, out = runJob(t, m, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}, Pty: &protocol.PtyArgs{}})
	if n := strings.Count(out, "TERM="); n != 1 || !strings.Contains(out, "TERM=xterm-256color") {
		t.Fatalf("pty job: %d TERM entries in %q, want TERM=xterm-256color once", n, out)
	}
}

// TestNoThreadPerRunningJob: running jobs are waited for (and their
// output read) through the netpoller, not by a thread each blocked in
// poll(2) or waitid.
func TestNoThreadPerRunningJob(t *testing.T) {
	if !pidfdsWork() {
		t.Skip("this kernel has no usable pidfds (needs Linux 5.4): a thread waits per job there")
	}
	threads := func() int {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Threads:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
		t.Fatal("no Threads line")
		return 0
	}
	m := New(Config{MaxJobs: 200}, nil, nil)
	defer m.Close(context.Background())
	before := threads()
	const n = 150
	var running []*Job
	for range n {
		info, err := m.Spawn(protocol.SpawnArgs{Argv: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		j, _ := m.Get(info.JobID)
		running = append(running, j)
	}
	during := threads()
	for _, j := range running {
		if _, err := j.Kill(protocol.ReasonManualCancel, SigKill); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range running {
		<-j.Done()
	}
	if during-before > n/5 {
		t.Fatalf("%d threads before, %d with %d jobs running: a thread per job", before, during, n)
	}
	t.Logf("threads: %d before, %d with %d jobs running", before, during, n)
}

// TestQueuedWritesAreBounded: writes to a job that does not read its
// input each fail within the write timeout (2 s), waiting in line
// included: six at once do not take six times as long.
func TestQueuedWritesAreBounded(t *testing.T) {
	j := spawnWithStdin(t, protocol.SpawnArgs{Argv: []string{"sleep", "300"}, Stdin: true})
	took := make(chan time.Duration, 6)
	errs := make(chan error, 6)
	for range 6 {
		go func() {
			start := time.Now()
			_, err := j.Write(make([]byte, 128<<10), false)
			took <- time.Since(start)
			errs <- err
		}()
	}
	for range 6 {
		if d := <-took; d > 5*time.Second {
			t.Errorf("a write took %v; the bound is %v", d, writeTimeout)
		}
		if err := <-errs; !errors.Is(err, ErrNoInput) || !strings.Contains(err.Error(), "not reading its input") {
			t.Errorf("write: %v", err)
		}
	}
}

// TestWriteToClosedInput: a write to a job that closed its stdin is the
// client's late request (invalid-argument, saying so), not an internal
// error of the supervisor (it was: "write |stdin: broken pipe").
func TestWriteToClosedInput(t *testing.T) {
	j := spawnWithStdin(t, protocol.SpawnArgs{Shell: "exec 0<&-; echo closed; exec sleep 300", Stdin: true})
	waitFor(t, func() bool {
		res, _ := j.Poll(0, 0)
		return len(res.Chunks) > 0
	})
	_, err := j.Write([]byte("hello\n"), false)
	if !errors.Is(err, ErrNoInput) || !strings.Contains(err.Error(), "no longer reads its input") {
		t.Fatalf("write to a closed stdin: %v, want ErrNoInput (invalid-argument on the wire)", err)
	}
}

// spawnWithStdin starts args on a manager of its own and returns the job;
// the job is killed and the manager closed when the test ends.
func spawnWithStdin(t *testing.T, args protocol.SpawnArgs) *Job {
	t.Helper()
	m := New(Config{MaxJobs: 10}, nil, nil)
	t.Cleanup(func() { m.Close(context.Background()) })
	info, err := m.Spawn(args)
	if err != nil {
		t.Fatal(err)
	}
	j, err := m.Get(info.JobID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Kill(protocol.ReasonManualCancel, syscall.SIGKILL) })
	return j
}
