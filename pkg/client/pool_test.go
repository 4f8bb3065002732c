package client_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// newPool makes a Pool over sups; Close at the end of the test.
func newPool(t *testing.T, sups ...*supervisor) *client.Pool {
	t.Helper()
	var ms []client.PoolMember
	for _, s := range sups {
		ms = append(ms, client.PoolMember{Control: s.cfg.Control, Event: s.cfg.Event})
	}
	p, err := client.NewPool(client.PoolOptions{Members: ms, HealthInterval: 100 * time.Millisecond,
		Client: client.Options{RequestTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPoolPlacesOwnsAndAggregates: sessions stay on one member, every op
// finds its job's member (also from a second Pool: nothing is kept but
// the id), names are per member, list and health aggregate, a member gone
// is passed over and named in errors.
func TestPoolPlacesOwnsAndAggregates(t *testing.T) {
	sups := []*supervisor{start(t, nil), start(t, nil), start(t, nil)}
	before := clientGoroutines()
	p := newPool(t, sups...)
	ctx := ctxT(t, 60*time.Second)

	// (Rendezvous hashing places sessions by their names and the members'
	// random ipc paths: with 12 sessions one member got none in ~2% of
	// runs; with 40, in ~3 in 10 million.)
	const sessions, perSession = 40, 2
	bySession := map[string]string{}
	var jobs []client.PoolJob
	for i := 0; i < sessions*perSession; i++ {
		sess := fmt.Sprintf("s%d", i%sessions)
		j, err := p.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, SessionID: sess})
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := bySession[sess]; ok && prev != j.Member {
			t.Fatalf("session %s on %s and %s", sess, prev, j.Member)
		}
		bySession[sess] = j.Member
		jobs = append(jobs, j)
	}
	used := map[string]bool{}
	for _, m := range bySession {
		used[m] = true
	}
	if len(used) != 3 {
		t.Errorf("%d sessions used %d members, want 3", sessions, len(used))
	}
	// Without a session: spread by load. (The pool counts each spawn
	// up until the next health check, which says the session jobs, all
	// "true", have ended: until then its loads are stale by them.)
	for deadline := time.Now().Add(20 * time.Second); ; {
		settled := true
		for _, m := range p.Members() {
			settled = settled && m.Up && m.ActiveJobs == 0
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members' health never showed the session jobs ended: %+v", p.Members())
		}
		time.Sleep(20 * time.Millisecond) // (health checks have no event to wait on)
	}
	free := map[string]int{}
	for i := 0; i < 6; i++ {
		j, err := p.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "30"}})
		if err != nil {
			t.Fatal(err)
		}
		free[j.Member]++
		jobs = append(jobs, j)
	}
	if len(free) < 2 {
		t.Errorf("jobs without a session all on one member: %v", free)
	}

	// A member's Client, by its key: the one that holds its jobs.
	if c := p.Client(jobs[0].Member); c == nil || c.Options().ControlAddress != jobs[0].Member {
		t.Fatalf("Client(%s): %v", jobs[0].Member, c)
	} else if st, err := c.Status(ctx, jobs[0].JobID); err != nil || st.JobID != jobs[0].JobID {
		t.Fatalf("status through the member's Client: %+v %v", st, err)
	}
	if c := p.Client("tcp://127.0.0.1:1"); c != nil {
		t.Fatal("Client of a member the pool does not have")
	}

	// A second Pool (a restarted gateway) finds every job by its id.
	p2 := newPool(t, sups...)
	for _, j := range jobs {
		got, err := p2.Status(ctx, j.JobID)
		if err != nil || got.Member != j.Member || got.JobID != j.JobID {
			t.Fatalf("status %s from a new pool: %+v %v (spawned on %s)", j.JobID, got, err, j.Member)
		}
	}
	// A caller-chosen id is found by asking, then remembered.
	mine, err := p.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, JobID: "my-own-id", Name: "build"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := p2.Wait(ctx, "my-own-id", 10*time.Second); err != nil || got.Member != mine.Member {
		t.Fatalf("wait for a chosen id from a new pool: %+v %v", got, err)
	}
	// Names are per member: two members with a job named alike.
	var second client.PoolJob
	extra := 1 // (mine)
	for i := 0; ; i++ {
		second, err = p.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, Name: "build", SessionID: fmt.Sprint("n", i)})
		if err == nil {
			extra++ // (on mine's member once mine ended, which freed the name)
		}
		if err == nil && second.Member != mine.Member {
			break
		}
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeNameTaken {
				t.Fatal(err)
			}
		}
	}
	var amb *client.AmbiguousJobError
	if _, err := p2.Status(ctx, "build"); !errors.As(err, &amb) || len(amb.Members) != 2 {
		t.Fatalf("status by a name two members know: %v", err)
	}

	list, err := p.ListJobs(ctx, protocol.ListJobsArgs{})
	if err != nil || len(list) != len(jobs)+extra {
		t.Fatalf("list: %d jobs (want %d), %v", len(list), len(jobs)+extra, err)
	}
	hs, err := p.Health(ctx)
	if err != nil || len(hs) != 3 {
		t.Fatalf("health %+v %v", hs, err)
	}

	// A member gone: spawns go to the others, its jobs' calls name it.
	gone := jobs[0].Member
	var victim *supervisor
	for _, s := range sups {
		if s.cfg.Control == gone {
			victim = s
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	victim.Close(cctx)
	cancel()
	for _, j := range jobs[:perSession*sessions] {
		j2, err := p.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}, SessionID: j.SessionID})
		if err != nil || j2.Member == gone {
			t.Fatalf("spawn in session %s after its member went: %+v %v", j.SessionID, j2, err)
		}
	}
	start := time.Now()
	_, err = p.Status(ctx, jobs[0].JobID)
	var me *client.MemberError
	if !errors.As(err, &me) || me.Member != gone || !errors.Is(err, client.ErrMemberDown) {
		t.Fatalf("status of a job of a member gone: %v", err)
	}
	t.Logf("status of a job of a member gone failed in %v: %v", time.Since(start), err)
	var pe *client.PartialError
	if list, err = p.ListJobs(ctx, protocol.ListJobsArgs{}); !errors.As(err, &pe) || len(pe.Errs) != 1 || pe.Errs[0].Member != gone || len(list) == 0 {
		t.Fatalf("list with a member gone: %d jobs, %v", len(list), err)
	}
	for _, j := range jobs {
		if j.Member != gone && j.State != protocol.StateExited {
			p.Kill(ctx, j.JobID, "SIGKILL")
		}
	}
	p.Close()
	p2.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(clientGoroutines()) > len(before) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // (polling for the goroutines' end, with a deadline)
	}
	if after := clientGoroutines(); len(after) > len(before) {
		t.Fatalf("pkg/client goroutines: %d before the pools, %d after Close:\n%s", len(before), len(after), strings.Join(after, "\n\n"))
	}
}

// clientGoroutines returns the stacks of the goroutines running pkg/client
// code (not the tests'): the in-process supervisors' own come and go with
// their jobs.
func clientGoroutines() []string {
	buf := make([]byte, 8<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "/pkg/client.") && !strings.Contains(g, "/pkg/client_test.") {
			out = append(out, g)
		}
	}
	return out
}

// TestPoolFindsForgottenJobs: a job its supervisor no longer holds in
// memory, whose output it keeps in files, is found by id (without the
// pool's tag) and by name, and polled from there.
func TestPoolFindsForgottenJobs(t *testing.T) {
	forgetful := func(c *server.Config) { c.Jobs.MaxFinished = 1 }
	sups := []*supervisor{start(t, forgetful), start(t, forgetful)}
	p := newPool(t, sups...)
	ctx := ctxT(t, 60*time.Second)
	// Spawned on one supervisor directly: an id the pool knows nothing of.
	info, fin, err := sups[1].c.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"echo", "kept"}, Name: "old", Output: protocol.OutputDisk}, 20*time.Second)
	if err != nil || !fin {
		t.Fatalf("spawn: %v %v", fin, err)
	}
	if _, _, err := sups[1].c.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"true"}}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := sups[1].c.Status(ctx, info.JobID); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("job still in memory: %v", err)
	}
	for _, ref := range []string{info.JobID, "old"} {
		res, err := p.Poll(ctx, ref, 0, 0)
		if err != nil || res.Job.JobID != info.JobID || len(res.Chunks) == 0 || string(res.Chunks[0].Data) != "kept\n" {
			t.Fatalf("pool poll %s of a forgotten job: %+v %v", ref, res, err)
		}
	}
	if _, err := p.Poll(ctx, "never-was", 0, 0); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("poll of no job: %v", err)
	}
}
