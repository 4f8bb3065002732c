package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestPacedFollowLosesNothing: a follower slower than its job, with a
// ring buffer and an event queue far smaller than the output, gets every
// byte when it paces the job (spawn's pace, Follow's Paced): the job waits
// for it. The same follower unpaced loses output (a gap), which is what
// makes the first half mean something. A paced Follow that stops early
// releases the job.
func TestPacedFollowLosesNothing(t *testing.T) {
	s := start(t, func(c *server.Config) {
		c.Jobs.RingBytes = 256 << 10
		c.Jobs.MergeMaxBytes = 16 << 10
		c.SubscriberQueueBytes = 64 << 10
	})
	ctx := ctxT(t, 60*time.Second)
	const cmd = "seq 1 3000000" // (21 MB: more than the follower's socket and event buffers hold)
	want, err := exec.Command("sh", "-c", cmd).Output()
	if err != nil {
		t.Fatal(err)
	}
	follow := func(paced bool) (out []byte, gaps int) {
		t.Helper()
		j, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: cmd, Pace: paced})
		if err != nil {
			t.Fatal(err)
		}
		var opts []client.FollowOption
		if paced {
			opts = append(opts, client.Paced())
		}
		var buf bytes.Buffer
		err = s.c.Follow(ctx, j.JobID, 1, func(ev protocol.Event) error {
			switch ev.Kind {
			case protocol.KindGap:
				gaps++
			case protocol.KindStdout:
				var p protocol.OutputPayload
				if err := ev.DecodePayload(&p); err != nil {
					return err
				}
				buf.Write(p.Data)
				time.Sleep(time.Millisecond) // a slow reader (not a wait for anything)
			}
			return nil
		}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), gaps
	}
	if out, gaps := follow(true); gaps != 0 || !bytes.Equal(out, want) {
		t.Fatalf("paced: %d gaps, %d of %d bytes", gaps, len(out), len(want))
	}
	if out, gaps := follow(false); gaps == 0 || len(out) >= len(want) {
		t.Fatalf("unpaced, the slow follower lost nothing (%d gaps, %d of %d bytes): the test does not show pacing works", gaps, len(out), len(want))
	}

	// A paced Follow given up early lets the job run on to its end.
	j, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: cmd, Pace: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("enough")
	if err := s.c.Follow(ctx, j.JobID, 1, func(ev protocol.Event) error {
		if ev.Kind == protocol.KindStdout {
			return stop
		}
		return nil
	}, client.Paced()); !errors.Is(err, stop) {
		t.Fatalf("follow: %v", err)
	}
	if _, fin, err := s.c.Wait(ctx, j.JobID, 20*time.Second); err != nil || !fin {
		t.Fatalf("a job whose paced follower stopped did not end: finished %v (%v)", fin, err)
	}
}

// TestPaceEndsWithConnection: a job paced by a connection that goes away
// (a client that crashed or closed) is not held by it any more; status
// says when a job waits for its pacer, and jobs_output_paced counts it;
// the pace op checks its arguments.
func TestPaceEndsWithConnection(t *testing.T) {
	s := start(t, func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	ctx := ctxT(t, 60*time.Second)
	c2 := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event, RequestTimeout: 10 * time.Second})
	j, err := c2.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"seq", "1", "3000000"}, Pace: true})
	if err != nil {
		t.Fatal(err)
	}
	waitPaced(t, s, j.JobID)
	if m := metricsText(t, s); !bytes.Contains(m, []byte("\nexec_supervisor_jobs_output_paced 1\n")) {
		t.Fatalf("the paced job is not counted:\n%s", m)
	}
	var res protocol.PaceResult
	if err := c2.Call(ctx, protocol.OpPace, protocol.PaceArgs{JobID: j.JobID, Offset: 100}, &res); err != nil || res.WindowBytes != 1<<20 || res.Job.JobID != j.JobID {
		t.Fatalf("pace: %+v (%v)", res, err)
	}
	for _, bad := range []protocol.PaceArgs{{JobID: j.JobID, Offset: -1}, {Offset: 5}} {
		if err := c2.Call(ctx, protocol.OpPace, bad, nil); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
			t.Errorf("pace %+v: %v, want invalid-argument", bad, err)
		}
	}
	if err := c2.Call(ctx, protocol.OpPace, protocol.PaceArgs{JobID: "j-0000000000000001"}, nil); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Errorf("pace of an unknown job: %v", err)
	}
	c2.Close()
	if info, fin, err := s.c.Wait(ctx, j.JobID, 20*time.Second); err != nil || !fin || info.StdoutBytes < 20<<20 {
		t.Fatalf("after its pacer's connection closed: finished %v, %d bytes (%v)", fin, info.StdoutBytes, err)
	}
	if m := metricsText(t, s); !bytes.Contains(m, []byte("\nexec_supervisor_jobs_output_paced 0\n")) {
		t.Fatal("a job no longer paced is still counted")
	}
}

// TestPacedFollowFromTheEnd: a paced Follow that starts past the output
// already printed (from the next seq of a job held by another pacer)
// takes its pace from where the output stands, not from offset 0: when
// the other pacer goes away the job goes on, and the follower gets the
// rest (it held the job forever).
func TestPacedFollowFromTheEnd(t *testing.T) {
	s := start(t, nil)
	ctx := ctxT(t, 60*time.Second)
	c2 := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event, RequestTimeout: 10 * time.Second})
	defer c2.Close()
	j, err := c2.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"seq", "1", "3000000"}, Pace: true})
	if err != nil {
		t.Fatal(err)
	}
	info := waitPaced(t, s, j.JobID)
	// The first pacer goes away a little after the follow began (so that
	// the follower is likely pacing by then; the outcome must be the same
	// either way).
	go func() {
		time.Sleep(300 * time.Millisecond)
		c2.Close()
	}()
	var got int64
	err = s.c.Follow(ctx, j.JobID, info.LastSeq+1, func(ev protocol.Event) error {
		if ev.Kind == protocol.KindStdout {
			var p protocol.OutputPayload
			if err := ev.DecodePayload(&p); err != nil {
				return err
			}
			got = p.Offset + int64(len(p.Data))
		}
		return nil
	}, client.Paced())
	if err != nil || got != 22888896 {
		t.Fatalf("follow from the end: %v; output up to %d of 22888896", err, got)
	}
}

// waitPaced waits until job id waits for its pacer, and returns its info.
func waitPaced(t *testing.T, s *supervisor, id string) protocol.JobInfo {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := s.c.Status(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.OutputPaced {
			return info
		}
		if time.Now().After(deadline) || info.Finished() {
			t.Fatalf("never paced: %+v", info)
		}
		time.Sleep(10 * time.Millisecond) // polling the job's state
	}
}

// TestPacedFollowCancelledWhileStuck: a paced Follow whose fn is stuck
// (writing to a pipe nobody reads, say) releases the job as soon as its
// context is done, not when fn returns: the job must not wait for it.
func TestPacedFollowCancelledWhileStuck(t *testing.T) {
	s := start(t, nil)
	ctx := ctxT(t, 60*time.Second)
	j, err := s.c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"seq", "1", "3000000"}, Pace: true})
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	stuck, unstick := make(chan struct{}), make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- s.c.Follow(fctx, j.JobID, 1, func(ev protocol.Event) error {
			if ev.Kind == protocol.KindStdout {
				once.Do(func() { close(stuck) })
				<-unstick
			}
			return nil
		}, client.Paced())
	}()
	<-stuck
	waitPaced(t, s, j.JobID)
	cancel()
	if _, fin, err := s.c.Wait(ctx, j.JobID, 20*time.Second); err != nil || !fin {
		t.Fatalf("a job whose paced follower was cancelled while stuck did not end: finished %v (%v)", fin, err)
	}
	close(unstick)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("follow: %v", err)
	}
}

// TestPacedJobHandle: a Job started with Pace holds the job to its
// reader: a slow reader of a small buffer gets every byte (the job waits
// for it), where the Job's follow did not pace and held the job until
// the stall limit; a Stderr never read does not hold it; Close ends a
// follow waiting for room. (Found by a gateway-integration audit.)
func TestPacedJobHandle(t *testing.T) {
	s := start(t, func(c *server.Config) {
		c.Jobs.RingBytes = 256 << 10
		c.Jobs.MergeMaxBytes = 16 << 10
	})
	ctx := ctxT(t, 60*time.Second)
	const cmd = "seq 1 600000; seq 1 300000 >&2" // (4.5 MB: far more than the ring)
	want, err := exec.Command("sh", "-c", "seq 1 600000").Output()
	if err != nil {
		t.Fatal(err)
	}
	j, err := s.c.Start(ctx, protocol.SpawnArgs{Shell: cmd, Pace: true}, 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	got := readSlowly(t, j.Stdout())
	buf := make([]byte, 8<<10) // (for the readers below that read once, then stop)
	ex, err := j.Wait(ctx)
	if err != nil || ex.Reason != protocol.ReasonExit {
		t.Fatalf("wait: %+v, %v", ex, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("stdout: %d of %d bytes", len(got), len(want))
	}
	// (stderr, never read, overflowed its buffer: reported, not waited for)
	if lost := j.Lost(); len(lost) == 0 || lost[0].Stream != protocol.Stderr {
		t.Fatalf("losses %v: want stderr's overflow reported", lost)
	}

	// A paced Job whose reader stopped: Close ends its follow (waiting
	// for room).
	k, err := s.c.Start(ctx, protocol.SpawnArgs{Shell: "seq 1 600000", Pace: true}, 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Stdout().Read(buf); err != nil { // (a reader that started, then stopped)
		t.Fatal(err)
	}
	awaitPaced(ctx, t, s.c, k.ID)
	closed := make(chan struct{})
	go func() { k.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a paced Job waiting for its reader did not return")
	}
	if _, fin, err := s.c.Wait(ctx, k.ID, 20*time.Second); err != nil || !fin {
		t.Fatalf("the job of a closed paced Job did not end: %v %v", fin, err)
	}

	// Wait without reading: the job is not held for a reader that never
	// came (what overflows the buffer is dropped, reported).
	w, err := s.c.Start(ctx, protocol.SpawnArgs{Shell: "seq 1 300000", Pace: true}, 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if ex, err := w.Wait(wctx); err != nil || ex.Reason != protocol.ReasonExit {
		t.Fatalf("Wait of a paced Job nobody reads: %+v, %v", ex, err)
	}
	if len(w.Lost()) == 0 {
		t.Fatal("the unread output that overflowed was not reported lost")
	}

	// A reader that started, then stopped; the job is killed: Wait
	// returns its end (the follow waited for room for good).
	st, err := s.c.Start(ctx, protocol.SpawnArgs{Shell: "seq 1 600000; sleep 300", Pace: true}, 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Stdout().Read(buf); err != nil {
		t.Fatal(err)
	}
	awaitPaced(ctx, t, s.c, st.ID)
	if err := st.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if ex, err := st.Wait(sctx); err != nil || ex.Reason != protocol.ReasonManualCancel {
		t.Fatalf("Wait of a killed paced Job whose reader stopped: %+v, %v", ex, err)
	}

	// Close of the client ends a paced Job's follow waiting for room.
	c2 := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event})
	defer c2.Close()
	r, err := c2.Start(ctx, protocol.SpawnArgs{Shell: "seq 1 600000", Pace: true}, 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Stdout().Read(buf); err != nil { // (a reader that started, then stopped)
		t.Fatal(err)
	}
	awaitPaced(ctx, t, s.c, r.ID)
	c2.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if _, err := r.Wait(rctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Wait after the client's Close: %v, want ErrClosed", err)
	}
}

// awaitPaced waits until job id waits for its pacer (polling status).
func awaitPaced(ctx context.Context, t *testing.T, c *client.Client, id string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := c.Status(ctx, id)
		if err == nil && info.OutputPaced {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s was never held for its reader: %+v, %v", id, info, err)
		}
		time.Sleep(5 * time.Millisecond) // (polling status)
	}
}

// TestPaceSurvivesConnectionLoss: a paced follower whose fn is busy when
// the control connection is lost (here: a request that ran past
// RequestTimeout, after which the client gives the connection up) paces
// the job again on the next connection at once: the supervisor ended the
// old connection's pace, and the job ran free until fn returned.
func TestPaceSurvivesConnectionLoss(t *testing.T) {
	s := start(t, nil)
	ctx := ctxT(t, 60*time.Second)
	c := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event, RequestTimeout: time.Second})
	defer c.Close()
	j, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"yes"}, Pace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.c.Kill(ctx, j.JobID, "SIGKILL")
	busy := make(chan struct{})
	fctx, stop := context.WithCancel(ctx)
	followed := make(chan error, 1)
	go func() {
		followed <- c.Follow(fctx, j.JobID, 1, func(ev protocol.Event) error {
			if ev.Kind == protocol.KindStdout {
				<-busy // (fn busy for the rest of the test)
			}
			return nil
		}, client.Paced())
	}()
	defer func() { stop(); close(busy); <-followed }()
	awaitPaced(ctx, t, s.c, j.JobID)
	// A write the job does not read takes the supervisor 2 s: the client
	// gives up after 1 s and drops the connection (and with it the pace).
	reader, err := c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "30"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.c.Kill(ctx, reader.JobID, "SIGKILL")
	if _, err := c.Write(ctx, reader.JobID, make([]byte, 200<<10), false); err == nil {
		t.Fatal("a write the job does not read returned within the request timeout: the connection was not dropped")
	}
	// Held again, from what the follower had taken: not running free.
	// (Time passing is the point here: a job running free prints
	// hundreds of MB in it; held, a window past a first chunk.)
	time.Sleep(time.Second)
	if info := s.info(ctx, t, j.JobID); !info.OutputPaced || info.OutputEnd > 32<<20 {
		t.Fatalf("after the connection was lost: paced %v, output end %d: the job ran free", info.OutputPaced, info.OutputEnd)
	}
}

func (s *supervisor) info(ctx context.Context, t *testing.T, id string) protocol.JobInfo {
	t.Helper()
	info, err := s.c.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// readSlowly reads r to its end as a reader that falls behind now and
// then, failing on any error (a loss included).
func readSlowly(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var got bytes.Buffer
	buf := make([]byte, 8<<10)
	for {
		n, err := r.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			return got.Bytes()
		}
		if err != nil {
			t.Fatalf("read: %v after %d bytes", err, got.Len())
		}
		if got.Len()%(512<<10) < n {
			time.Sleep(20 * time.Millisecond) // a reader that falls behind now and then (not a wait for anything)
		}
	}
}
