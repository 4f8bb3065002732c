package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestStoppedMemberEndsAfterLeader: a stopped process left in a job's
// process group when its leader exits is continued right after the
// SIGTERM that ends it, so the job ends at once instead of waiting out
// its grace period for SIGKILL. It takes a real supervisor: as child
// subreaper (its default) it adopts the member, whose group is then not
// orphaned, and the kernel does not continue it (SIGHUP, SIGCONT) as it
// does for an orphaned group; a supervisor inside a test process cannot
// be a subreaper.
func TestStoppedMemberEndsAfterLeader(t *testing.T) {
	e := newEnv(t)
	s := e.start(t, "--grace", "60s") // (never waited out: the test gives up well before)
	ctx := ctxFor(t, 60*time.Second)
	j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 300 & echo $!; read x", Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killGroups([]int{j.Pgid}) })
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0; {
		if p, err := s.client.Poll(ctx, j.JobID, 0, 0); err == nil && len(p.Chunks) > 0 {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(p.Chunks[0].Data)))
		}
		if time.Now().After(deadline) {
			t.Fatal("the member's pid was not printed")
		}
		time.Sleep(10 * time.Millisecond) // polling the job's output
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil { // (the member only: the leader reads on)
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); procState(pid) != "T"; {
		if time.Now().After(deadline) {
			t.Fatalf("member %d not stopped (state %q)", pid, procState(pid))
		}
		time.Sleep(5 * time.Millisecond) // polling the process table
	}
	if _, err := s.client.Write(ctx, j.JobID, []byte("go\n"), true); err != nil {
		t.Fatal(err)
	}
	end, fin, err := s.client.Wait(ctx, j.JobID, 20*time.Second)
	if err != nil || !fin {
		t.Fatalf("the job did not end within 20 s of its leader (grace 60 s): %+v, finished %v, %v", end, fin, err)
	}
	if end.Reason != protocol.ReasonExit {
		t.Fatalf("reason %s", end.Reason)
	}
}

// procState is the state letter of pid in /proc (T: stopped), or "".
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return f[0]
}
