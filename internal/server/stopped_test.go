package server

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// procState is the state letter of pid in /proc (T: stopped), or "".
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[0]
}

// stopAndWait sends SIGSTOP to target (a pid, or -pgid for a process
// group) and waits until pid is stopped.
func stopAndWait(t *testing.T, target, pid int) {
	t.Helper()
	if err := syscall.Kill(target, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the job stopped (SIGSTOP)", func() bool { return procState(pid) == "T" })
}

// TestKillStoppedJob: a job whose processes were stopped (SIGSTOP, or
// Ctrl-Z in a terminal) is continued right after the SIGTERM of its
// termination, so it ends on that SIGTERM at once instead of waiting out
// its whole grace period for SIGKILL: pipe and PTY jobs, with and without
// a cgroup per job. A stopped process left in the group when the job's
// leader exits ends without SIGKILL too (here the kernel continues it as
// well, its group being orphaned: the supervisor of a test process is no
// subreaper; cmd/exec-supervisor's TestStoppedMemberEndsAfterLeader
// covers the subreaper's case).
func TestKillStoppedJob(t *testing.T) {
	const grace = 60 * time.Second // (never waited out: the test gives up well before)
	for _, mode := range []string{"cgroup", "pgid"} {
		t.Run(mode, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.NoCgroups = mode == "pgid"
			ts := startServer(t, cfg)
			ctx := ctxT(t, 60*time.Second)
			if mode == "cgroup" {
				needCgroups(t, ctx, ts)
			}
			for _, pty := range []bool{false, true} {
				name := "pipe"
				args := protocol.SpawnArgs{Argv: []string{"sleep", "300"}, GraceMs: grace.Milliseconds()}
				if pty {
					name, args.Pty = "pty", &protocol.PtyArgs{}
				}
				t.Run(name, func(t *testing.T) {
					j, err := ts.client.Spawn(ctx, args)
					if err != nil {
						t.Fatal(err)
					}
					stopAndWait(t, -j.Pgid, j.Pid)
					if _, err := ts.client.Kill(ctx, j.JobID, ""); err != nil {
						t.Fatal(err)
					}
					_, _, exit, _ := waitDone(t, ts.client, j.JobID, 20*time.Second)
					if exit.Reason != protocol.ReasonManualCancel || exit.Signal != "SIGTERM" {
						t.Fatalf("stopped %s job killed: reason %s, signal %q; want manual-cancel by SIGTERM", name, exit.Reason, exit.Signal)
					}
				})
			}
			t.Run("stopped member after the leader exits", func(t *testing.T) {
				j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 300 & echo $!; read x", Stdin: true, GraceMs: grace.Milliseconds()})
				if err != nil {
					t.Fatal(err)
				}
				var pid int
				eventually(t, 10*time.Second, "the member's pid", func() bool {
					p, err := ts.client.Poll(ctx, j.JobID, 0, 0)
					if err != nil || len(p.Chunks) == 0 {
						return false
					}
					pid, err = strconv.Atoi(strings.TrimSpace(string(p.Chunks[0].Data)))
					return err == nil
				})
				stopAndWait(t, pid, pid) // (the member only: the leader reads on)
				if _, err := ts.client.Write(ctx, j.JobID, []byte("go\n"), true); err != nil {
					t.Fatal(err)
				}
				_, _, exit, _ := waitDone(t, ts.client, j.JobID, 20*time.Second)
				if exit.Reason != protocol.ReasonExit {
					t.Fatalf("reason %s", exit.Reason)
				}
				if v := value(scrape2(t, ts), "exec_supervisor_cleanup_kills_total", "mode", mode); v != 0 {
					t.Fatalf("the stopped member needed SIGKILL (cleanup_kills_total{mode=%q} = %v)", mode, v)
				}
			})
		})
	}
}
