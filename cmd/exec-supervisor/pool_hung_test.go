package main

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestPoolHungMember: a supervisor of a pool stopped (SIGSTOP: its
// sockets open, its process not answering; not dead) is seen as down
// within the health timeout: new spawns of its sessions go elsewhere,
// followers and waiters of its jobs get a *MemberError naming it within
// the client's request timeout, never hanging, and a list names it beside
// the others' jobs. Continued (SIGCONT), it is up again: its jobs ran on
// meanwhile, and its sessions come back to it. The test continues it
// whatever happens (a cleanup), so that nothing is left stopped.
func TestPoolHungMember(t *testing.T) {
	if testing.Short() {
		t.Skip("three real supervisors, one stopped and continued: skipped with -short")
	}
	th := startThree(t)
	goroutines := runtime.NumGoroutine()
	const timeout = 5 * time.Second // the members' RequestTimeout
	opts := th.curve
	opts.RequestTimeout = timeout
	pool, err := client.NewPool(client.PoolOptions{Members: th.members, Client: opts, HealthInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx := ctxFor(t, 3*time.Minute)

	// A long job in each of 12 sessions; the victim is the first one's
	// member.
	var long []client.PoolJob
	for i := range 12 {
		j, err := pool.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}, SessionID: fmt.Sprintf("hung-%02d", i)})
		if err != nil {
			t.Fatal(err)
		}
		long = append(long, j)
	}
	t.Cleanup(func() { // (a last resort: the supervisors end them too)
		var pgids []int
		for _, j := range long {
			pgids = append(pgids, j.Pgid)
		}
		killGroups(pgids)
	})
	victim := long[0].Member
	var theirs []client.PoolJob
	for _, j := range long {
		if j.Member == victim {
			theirs = append(theirs, j)
		}
	}

	watch := followAndWait(ctx, pool, theirs)

	// Stop it; continue it whatever happens (before its process's own
	// cleanup, which signals it: cleanups run last first).
	pid := th.sups[victim].cmd.Process.Pid
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for deadline := time.Now().Add(10 * time.Second); procState(pid) != "T"; {
		if time.Now().After(deadline) {
			t.Fatalf("supervisor %d not stopped (state %q)", pid, procState(pid))
		}
		time.Sleep(5 * time.Millisecond) // (polling the process table)
	}

	// New spawns of its sessions go elsewhere. One sent to it before the
	// pool knew fails naming it (its fate unknown: the id is in the
	// error); the gateway spawns again.
	var firstElsewhere time.Duration
	var unknownFate []string
	for _, j := range theirs {
		for attempt := 0; ; attempt++ {
			j2, err := pool.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, SessionID: j.SessionID})
			var me *client.MemberError
			if errors.As(err, &me) && me.Member == victim && errors.Is(err, client.ErrMemberDown) && attempt < 3 {
				unknownFate = append(unknownFate, me.JobID)
				continue
			}
			if err != nil || j2.Member == victim {
				t.Fatalf("spawn in session %s with its member stopped: %+v %v", j.SessionID, j2, err)
			}
			break
		}
		if firstElsewhere == 0 {
			firstElsewhere = time.Since(stopped)
		}
	}
	t.Logf("first spawn of a stopped member's session landed elsewhere %v after SIGSTOP (%d sent to it first)", firstElsewhere, len(unknownFate))
	if firstElsewhere > timeout { // (the health timeout is half of it, after a HealthInterval)
		t.Errorf("spawns went elsewhere %v after SIGSTOP, over the client's request timeout %v", firstElsewhere, timeout)
	}

	// Followers and waiters: an explicit error naming it.
	watch.expectMemberDown(t, victim, stopped, timeout, timeout+20*time.Second)
	// Calls made now fail at once, naming it; a list names it beside
	// the others' jobs.
	if _, err := pool.Status(ctx, theirs[0].JobID); !errors.Is(err, client.ErrMemberDown) {
		t.Fatalf("status of a stopped member's job: %v", err)
	}
	list, err := pool.ListJobs(ctx, protocol.ListJobsArgs{})
	var pe *client.PartialError
	if !errors.As(err, &pe) || len(pe.Errs) != 1 || pe.Errs[0].Member != victim || len(list) < len(long)-len(theirs) {
		t.Fatalf("list with a member stopped: %d jobs, %v", len(list), err)
	}

	// Continued: up again, its jobs ran on, its sessions come back.
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	awaitMemberUp(t, pool, victim)
	for _, j := range theirs {
		got, err := pool.Status(ctx, j.JobID)
		if err != nil || got.Member != victim || got.State != protocol.StateRunning {
			t.Fatalf("status of %s after SIGCONT: %+v %v", j.JobID, got, err)
		}
	}
	for _, id := range unknownFate { // (sent while it was stopped: started once it read them, or not)
		got, err := pool.Status(ctx, id)
		t.Logf("spawn sent to the stopped supervisor (%s): %s %v", id, got.State, err)
	}
	if j, err := pool.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, SessionID: theirs[0].SessionID}); err != nil || j.Member != victim {
		t.Fatalf("spawn in its session after SIGCONT: %+v %v (want it on %s again)", j, err, victim)
	}

	for _, j := range long {
		if _, err := pool.Kill(ctx, j.JobID, "SIGKILL"); err != nil {
			t.Errorf("kill %s: %v", j.JobID, err)
		}
	}
	closeLeavesNoGoroutines(t, pool, goroutines)
}
