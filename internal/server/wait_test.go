package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func wantCode(t *testing.T, err error, code protocol.Code, msg string) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != code || !strings.Contains(pe.Message, msg) {
		t.Fatalf("got %v, want %s containing %q", err, code, msg)
	}
}

// TestSpawnWait: a spawn with waitMs answers once the job has finished,
// with its final state; its output and terminal event are there by then.
func TestSpawnWait(t *testing.T) {
	ts := startServer(t, testConfig(t))
	c := ts.client
	ctx := ctxT(t, 30*time.Second)

	info, finished, err := c.SpawnWait(ctx, protocol.SpawnArgs{Shell: "echo hi; exit 3"}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !finished || info.State != protocol.StateExited || info.ExitCode == nil || *info.ExitCode != 3 || info.Reason != protocol.ReasonExit {
		t.Fatalf("finished %v, job %+v; want exited with code 3", finished, info)
	}
	p, err := c.Poll(ctx, info.JobID, 0, 0)
	var out []byte
	for _, ch := range p.Chunks {
		out = append(out, ch.Data...)
	}
	if err != nil || string(out) != "hi\n" {
		t.Fatalf("poll after the wait: %q, %v", out, err)
	}
	sr, err := c.Subscribe(ctx, info.JobID, 1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(sr.Events); n == 0 || sr.Events[n-1].Kind != protocol.KindExited {
		t.Fatalf("events retained at the reply: %+v; want job.exited last", sr.Events)
	}

	// A spawn error is answered at once, as without waitMs.
	_, _, err = c.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"/nonexistent/binary"}}, 20*time.Second)
	wantCode(t, err, protocol.CodeSpawnError, "nonexistent")
}

// TestWaitRunsOut: a wait that runs out answers finished=false with the
// job as it is; the wait op then goes on, and ends when the job does.
func TestWaitRunsOut(t *testing.T) {
	ts := startServer(t, testConfig(t))
	c := ts.client
	ctx := ctxT(t, 30*time.Second)

	info, finished, err := c.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}}, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if finished || info.State != protocol.StateRunning {
		t.Fatalf("finished %v, state %s; want a running job", finished, info.State)
	}
	if _, finished, err = c.Wait(ctx, info.JobID, 50*time.Millisecond); err != nil || finished {
		t.Fatalf("wait on a running job: finished %v, %v", finished, err)
	}
	got := make(chan error, 1)
	var final protocol.JobInfo
	// (a held reply is released just after it was sent)
	eventually(t, 10*time.Second, "no wait held", func() bool { return ts.Server.heldWaits() == 0 })
	go func() {
		var ok bool
		var err error
		final, ok, err = c.Wait(ctx, info.JobID, 20*time.Second)
		if err == nil && !ok {
			err = errors.New("the wait ran out")
		}
		got <- err
	}()
	// The wait is held before the kill (else it would be answered at once
	// and this would not test holding at all).
	eventually(t, 10*time.Second, "the wait held", func() bool { return ts.Server.heldWaits() == 1 })
	if _, err := c.Kill(ctx, info.JobID, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if final.Reason != protocol.ReasonManualCancel || final.State != protocol.StateExited {
		t.Fatalf("final job %+v; want manual-cancel", final)
	}
	// Finished already: answered at once.
	if _, finished, err := c.Wait(ctx, info.JobID, 20*time.Second); err != nil || !finished {
		t.Fatalf("wait on a finished job: finished %v, %v", finished, err)
	}
}

// TestWaitBadInput: unknown job, missing id, waitMs out of range.
func TestWaitBadInput(t *testing.T) {
	ts := startServer(t, testConfig(t))
	c := ts.client
	ctx := ctxT(t, 20*time.Second)
	_, _, err := c.Wait(ctx, "no-such-job", time.Second)
	wantCode(t, err, protocol.CodeNotFound, "no-such-job")
	err = c.Call(ctx, protocol.OpWait, &protocol.WaitArgs{}, nil)
	wantCode(t, err, protocol.CodeInvalidArgument, "jobId")
	for _, ms := range []int64{-1, protocol.MaxWaitMs + 1} {
		err = c.Call(ctx, protocol.OpWait, &protocol.WaitArgs{JobID: "x", WaitMs: ms}, nil)
		wantCode(t, err, protocol.CodeInvalidArgument, "waitMs")
		err = c.Call(ctx, protocol.OpSpawn, &protocol.SpawnArgs{Argv: []string{"true"}, WaitMs: ms}, nil)
		wantCode(t, err, protocol.CodeInvalidArgument, "waitMs")
	}
	err = c.Call(ctx, protocol.OpWait, map[string]any{"jobId": 7}, nil)
	wantCode(t, err, protocol.CodeBadRequest, "")
	if n := ts.Server.heldWaits(); n != 0 {
		t.Fatalf("%d replies held after refused waits", n)
	}
}

// TestHeldRepliesDoNotBlock: more waits than a connection may have
// requests in flight, and the same connection still gets answers (and
// can kill the job they wait for). Past the per-connection bound a wait
// is refused, and a spawn with waitMs is refused before it starts
// anything.
func TestHeldRepliesDoNotBlock(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxPeerHeldReplies = 40
	cfg.MetricsAddr = "127.0.0.1:0"
	ts := startServer(t, cfg)
	c := ts.client
	ctx := ctxT(t, 30*time.Second)
	j, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, finished, err := c.Wait(ctx, j.JobID, 25*time.Second)
			if err == nil && !finished {
				err = errors.New("wait ran out")
			}
			errs <- err
		}()
	}
	eventually(t, 10*time.Second, "40 replies held", func() bool { return ts.Server.heldWaits() == 40 })
	if got := value(scrape(t, ts.MetricsAddr().String()), "exec_supervisor_held_waits"); got != 40 {
		t.Fatalf("exec_supervisor_held_waits = %v with 40 waits held", got)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("health while 40 waits are held: %v", err)
	}
	_, _, err = c.Wait(ctx, j.JobID, time.Second)
	wantCode(t, err, protocol.CodeTooManyWaits, "this connection")
	before, _ := ts.jobs.Counts()
	_, _, err = c.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"true"}}, time.Second)
	wantCode(t, err, protocol.CodeTooManyWaits, "this connection")
	if after, _ := ts.jobs.Counts(); after != before {
		t.Fatalf("a refused spawn-and-wait started a job (%d -> %d active)", before, after)
	}
	// Another connection has its own bound.
	other := client.New(client.Options{ControlAddress: cfg.Control, RequestTimeout: 10 * time.Second, Token: ts.token})
	defer other.Close()
	if _, finished, err := other.Wait(ctx, j.JobID, 10*time.Millisecond); err != nil || finished {
		t.Fatalf("wait on another connection: finished %v, %v", finished, err)
	}
	if _, err := c.Kill(ctx, j.JobID, ""); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "no reply held", func() bool { return ts.Server.heldWaits() == 0 })
}

// TestHeldReplyOfGoneClient: a client that goes away while a reply is
// held for it frees what the wait held.
func TestHeldReplyOfGoneClient(t *testing.T) {
	cfg := testConfig(t)
	ts := startServer(t, cfg)
	ctx := ctxT(t, 30*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	gone := client.New(client.Options{ControlAddress: cfg.Control, RequestTimeout: 10 * time.Second, Token: ts.token})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _, _ = gone.Wait(ctx, j.JobID, 25*time.Second)
	}()
	eventually(t, 10*time.Second, "one reply held", func() bool { return ts.Server.heldWaits() == 1 })
	gone.Close()
	<-done
	eventually(t, 10*time.Second, "no reply held", func() bool { return ts.Server.heldWaits() == 0 })
	if _, err := ts.client.Kill(ctx, j.JobID, ""); err != nil {
		t.Fatal(err)
	}
}

// TestHeldReplyAtShutdown: a supervisor that shuts down ends its jobs
// first, so a held wait is answered with the job's end.
func TestHeldReplyAtShutdown(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 30*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		info     protocol.JobInfo
		finished bool
		err      error
	}
	got := make(chan res, 1)
	go func() {
		info, finished, err := ts.client.Wait(ctx, j.JobID, 25*time.Second)
		got <- res{info, finished, err}
	}()
	eventually(t, 10*time.Second, "one reply held", func() bool { return ts.Server.heldWaits() == 1 })
	if err := ts.Server.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || !r.finished || r.info.Reason != protocol.ReasonShutdown {
		t.Fatalf("wait across shutdown: finished %v, reason %s, %v", r.finished, r.info.Reason, r.err)
	}
}

// TestCancelledWaitKeepsConnection: a caller that gives up one held wait
// loses only that call; the connection's other held waits and requests
// go on.
func TestCancelledWaitKeepsConnection(t *testing.T) {
	ts := startServer(t, testConfig(t))
	c := ts.client
	ctx := ctxT(t, 30*time.Second)
	j, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, _, err := c.Wait(short, j.JobID, 25*time.Second)
		gaveUp <- err
	}()
	other := make(chan error, 1)
	go func() {
		_, finished, err := c.Wait(ctx, j.JobID, 25*time.Second)
		if err == nil && !finished {
			err = errors.New("the wait ran out")
		}
		other <- err
	}()
	eventually(t, 10*time.Second, "two waits held", func() bool { return ts.Server.heldWaits() == 2 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled wait returned %v", err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("health after a cancelled wait: %v", err)
	}
	if _, err := c.Kill(ctx, j.JobID, ""); err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatalf("the other wait on the connection: %v", err)
	}
}

// TestSlowRequestDoesNotHoldItsConnection: a request that may wait (a
// write to a job that does not read its input: 2 s) is not handled on its
// connection's reader, even when it arrives alone: a request sent behind
// it on the same connection is answered first.
func TestSlowRequestDoesNotHoldItsConnection(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 30*time.Second)
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.client.Kill(context.Background(), j.JobID, "SIGKILL")
	c, err := zmtp.DialClient(ctx, "DEALER", ts.cfg.Control, time.Second, ts.Server.token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	write, err := protocol.EncodeRequest("w", protocol.OpWrite, &protocol.WriteArgs{JobID: j.JobID, Data: make([]byte, 256<<10)})
	if err != nil {
		t.Fatal(err)
	}
	health, err := protocol.EncodeRequest("h", protocol.OpHealth, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(write); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(health); err != nil {
		t.Fatal(err)
	}
	var order []string
	for range 2 {
		m, err := c.Recv()
		if err != nil {
			t.Fatal(err)
		}
		rep, err := protocol.DecodeReplyNoCopy(m[len(m)-1])
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, rep.ID)
		if rep.ID == "w" && (rep.Error == nil || !strings.Contains(rep.Error.Message, "not reading its input")) {
			t.Fatalf("write: %+v, want the job not reading its input", rep.Error)
		}
	}
	if order[0] != "h" {
		t.Fatalf("replies in order %v: the health request waited for the write", order)
	}
}

// TestFinishedJobKeepsItsSeqsAcrossRestart: a job that had finished when
// its supervisor stopped has, after a restart, its terminal event at the
// seq it had (it was numbered one past it: a client that had the terminal
// event and followed on got a second one), and its retained output tail
// as the events it was (it was one stdout chunk under the last one's seq,
// holding the bytes of earlier ones: a client resuming at that seq got
// bytes it had again).
func TestFinishedJobKeepsItsSeqsAcrossRestart(t *testing.T) {
	cfg := testConfig(t)
	s1 := startServer(t, cfg)
	ctx := ctxT(t, 30*time.Second)
	j, finished, err := s1.client.SpawnWait(ctx, protocol.SpawnArgs{Shell: "echo one; sleep 0.1; echo two >&2; sleep 0.1; echo three"}, 10*time.Second)
	if err != nil || !finished {
		t.Fatalf("spawn: finished %v, %v", finished, err)
	}
	output := func(c *client.Client) []string {
		t.Helper()
		res, err := c.Subscribe(ctx, j.JobID, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, ev := range res.Events {
			if ev.Kind == protocol.KindStdout || ev.Kind == protocol.KindStderr {
				var p protocol.OutputPayload
				if err := ev.DecodePayload(&p); err != nil {
					t.Fatal(err)
				}
				out = append(out, fmt.Sprintf("%d %s @%d %q", ev.Seq, ev.Kind, p.Offset, p.Data))
			}
		}
		return out
	}
	before := output(s1.client)
	if len(before) != 3 {
		t.Fatalf("output events before the restart: %q, want 3 (the merge window is 20 ms)", before)
	}
	if err := s1.Server.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := startServer(t, cfg)
	got, err := s2.client.Subscribe(ctx, j.JobID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Job.LastSeq != j.LastSeq {
		t.Fatalf("last seq %d after the restart, %d before", got.Job.LastSeq, j.LastSeq)
	}
	last := got.Events[len(got.Events)-1]
	if !last.Kind.Terminal() || last.Seq != j.LastSeq {
		t.Fatalf("last event %s at seq %d, want the terminal event at %d", last.Kind, last.Seq, j.LastSeq)
	}
	if after := output(s2.client); strings.Join(after, "; ") != strings.Join(before, "; ") {
		t.Fatalf("output events after the restart:\n%q\nbefore:\n%q", after, before)
	}
}

// TestCancelHeldWait: a wait the caller gave up on (its context) is
// cancelled on the supervisor: it no longer counts against the
// connection's held waits (a leak audit cancelled 1100 waits on one
// client and got too-many-waits after 1000: each stayed held for its
// waitMs). The cancel op: only the asking connection's own held request,
// never answered afterwards.
func TestCancelHeldWait(t *testing.T) {
	cfg := testConfig(t)
	ts := startServer(t, cfg)
	c := ts.client
	ctx := ctxT(t, 60*time.Second)
	info, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(context.Background(), info.JobID, "SIGKILL")
	var wg sync.WaitGroup
	for range 25 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 48 { // 1200 in all, past the 1000 a connection may hold
				// (cancelled, not a deadline: a deadline would shorten
				// the wait the supervisor holds)
				wctx, cancel := context.WithCancel(ctx)
				stop := time.AfterFunc(30*time.Millisecond, cancel)
				_, _, err := c.Wait(wctx, info.JobID, time.Hour)
				stop.Stop()
				cancel()
				if err == nil || !errors.Is(err, context.Canceled) {
					t.Errorf("a wait on a running job: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	eventually(t, 10*time.Second, "the abandoned waits given up", func() bool { return ts.Server.heldWaits() == 0 })
	if _, finished, err := c.Wait(ctx, info.JobID, 50*time.Millisecond); err != nil || finished {
		t.Fatalf("a wait after 1200 abandoned ones: %v (finished %v)", err, finished)
	}

	// The op itself, on raw connections.
	dial := func() *zmtp.Client {
		d, err := zmtp.DialClient(ctx, "DEALER", cfg.Control, time.Second, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	call := func(d *zmtp.Client, id string, op protocol.Op, args any) {
		body, _ := protocol.EncodeRequest(id, op, args)
		if err := d.Send(body); err != nil {
			t.Fatal(err)
		}
	}
	a, b := dial(), dial()
	call(a, "w1", protocol.OpWait, &protocol.WaitArgs{JobID: info.JobID, WaitMs: 3_600_000})
	eventually(t, 10*time.Second, "the wait held", func() bool { return ts.Server.heldWaits() == 1 })
	for _, tc := range []struct {
		d    *zmtp.Client
		id   string
		want bool
	}{{b, "w1", false}, {a, "other", false}, {a, "w1", true}, {a, "w1", false}} {
		call(tc.d, "c", protocol.OpCancel, &protocol.CancelArgs{RequestID: tc.id})
		var res protocol.CancelResult
		if rep := recvReply(t, tc.d); rep.ID != "c" || rep.DecodeResult(&res) != nil || res.Cancelled != tc.want {
			t.Fatalf("cancel %q: reply %+v %+v; want cancelled %v", tc.id, rep, res, tc.want)
		}
	}
	if n := ts.Server.heldWaits(); n != 0 {
		t.Fatalf("%d waits held after the cancel", n)
	}
	// The cancelled wait is never answered: the next reply is health's.
	call(a, "h", protocol.OpHealth, nil)
	if rep := recvReply(t, a); rep.ID != "h" {
		t.Fatalf("reply %q after a cancelled wait", rep.ID)
	}
	call(a, "c", protocol.OpCancel, &protocol.CancelArgs{})
	if rep := recvReply(t, a); rep.Error == nil || rep.Error.Code != protocol.CodeInvalidArgument {
		t.Fatalf("cancel without requestId: %+v", rep)
	}
}

// Requests on one DEALER are handled concurrently, so a cancel sent right
// behind its wait may be handled before the wait is held, and a spawn
// with waitMs cancelled before it was handled must start nothing. Every
// cancel must stick: each answers cancelled, no wait stays held, no wait
// is answered, no job is started by a cancelled spawn. (pkg/client's
// abandon sends its cancel once: a lost one left the wait held until its
// job ended.)
func TestCancelOvertakingWait(t *testing.T) {
	cfg := testConfig(t)
	cfg.Jobs.MaxJobs = 500 // (most cancelled spawns have started when their cancel comes)
	ts := startServer(t, cfg)
	ctx := ctxT(t, 60*time.Second)
	info, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.client.Kill(context.Background(), info.JobID, "SIGKILL")
	d, err := zmtp.DialClient(ctx, "DEALER", cfg.Control, time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, before := ts.Server.jobs.Counts()
	const n = 200
	go func() {
		for i := range n {
			var req []byte
			if i%2 == 0 {
				req, _ = protocol.EncodeRequest(fmt.Sprintf("w%d", i), protocol.OpWait, &protocol.WaitArgs{JobID: info.JobID, WaitMs: 3_600_000})
			} else {
				req, _ = protocol.EncodeRequest(fmt.Sprintf("w%d", i), protocol.OpSpawn, &protocol.SpawnArgs{Argv: []string{"sleep", "300"}, WaitMs: 3_600_000})
			}
			cancel, _ := protocol.EncodeRequest(fmt.Sprintf("c%d", i), protocol.OpCancel, &protocol.CancelArgs{RequestID: fmt.Sprintf("w%d", i)})
			if d.Send(req) != nil || d.Send(cancel) != nil {
				return
			}
		}
	}()
	cancelled := 0
	var jobs []string
	for cancelled < n {
		rep := recvReply(t, d)
		switch {
		case strings.HasPrefix(rep.ID, "c"):
			var res protocol.CancelResult
			if err := rep.DecodeResult(&res); err != nil || !res.Cancelled {
				t.Fatalf("cancel %s: %+v %v; want cancelled", rep.ID, res, err)
			}
			if res.JobID != "" && res.JobID != info.JobID {
				jobs = append(jobs, res.JobID)
			}
			cancelled++
		case rep.Error != nil && rep.Error.Code == protocol.CodeCancelled:
			// (a request cancelled before it was handled)
		default:
			t.Fatalf("a cancelled wait was answered: %+v", rep)
		}
	}
	eventually(t, 10*time.Second, "no wait held", func() bool { return ts.Server.heldWaits() == 0 })
	// The spawns cancelled once started are named by their cancel (the
	// server's stop ends them); the others started nothing.
	if _, after := ts.Server.jobs.Counts(); after-before > len(jobs) {
		t.Fatalf("%d jobs started by cancelled spawns; %d named by their cancel", after-before, len(jobs))
	}
}

// recvReply reads the next reply off a raw DEALER connection.
func recvReply(t *testing.T, d *zmtp.Client) *protocol.Reply {
	t.Helper()
	fr, err := d.Recv()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := protocol.DecodeReply(fr[len(fr)-1])
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
