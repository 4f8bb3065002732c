package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/server"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/local"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

type supervisor struct {
	*server.Server
	cfg server.Config
	c   *client.Client
}

// testConfig is a supervisor configuration for tests, its sockets and
// state in a fresh directory (removed when t ends), which it returns too.
func testConfig(t testing.TB) (server.Config, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "cl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := server.DefaultConfig()
	cfg.Control, cfg.Event = "ipc://"+filepath.Join(dir, "c.sock"), "ipc://"+filepath.Join(dir, "e.sock")
	cfg.StateDir, cfg.MetricsAddr = filepath.Join(dir, "state"), ""
	cfg.Jobs.MergeInterval = 10 * time.Millisecond
	cfg.HeartbeatInterval = 200 * time.Millisecond
	cfg.Subreaper = false // the test process waits for children of its own
	cfg.CPUHome = false   // (per process: this one runs several servers, and its tests)
	return cfg, dir
}

func start(t testing.TB, tweak func(*server.Config)) *supervisor {
	t.Helper()
	cfg, _ := testConfig(t)
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := server.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event, RequestTimeout: 10 * time.Second})
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return &supervisor{Server: s, cfg: cfg, c: c}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func readAll(t *testing.T, r io.Reader) (string, error) {
	t.Helper()
	var b bytes.Buffer
	_, err := io.Copy(&b, r)
	return b.String(), err
}

// TestDispatcherModesBehaveAlike runs the same job behaviours in origin
// and zmq mode.
func TestDispatcherModesBehaveAlike(t *testing.T) {
	s := start(t, nil)
	origin := local.New(0)
	t.Cleanup(func() { origin.Close(context.Background()) })
	for _, mode := range []client.Mode{client.ModeOrigin, client.ModeZMQ} {
		t.Run(string(mode), func(t *testing.T) {
			d := client.NewDispatcher(s.c, origin)
			ctx := ctxT(t, 30*time.Second)
			if err := d.SetMode(ctx, mode); err != nil {
				t.Fatal(err)
			}
			j, err := d.Start(ctx, protocol.SpawnArgs{Shell: "echo out; echo err >&2; exit 3"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			out, err := readAll(t, j.Stdout())
			if err != nil || out != "out\n" {
				t.Fatalf("stdout %q %v", out, err)
			}
			errs, err := readAll(t, j.Stderr())
			if err != nil || errs != "err\n" {
				t.Fatalf("stderr %q %v", errs, err)
			}
			exit, err := j.Wait(ctx)
			if err != nil || exit.Reason != protocol.ReasonExit || *exit.ExitCode != 3 {
				t.Fatalf("exit %+v %v", exit, err)
			}
			j.Close()

			j, err = d.Start(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "30"}}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Kill(ctx); err != nil {
				t.Fatal(err)
			}
			if exit, err := j.Wait(ctx); err != nil || exit.Reason != protocol.ReasonManualCancel {
				t.Fatalf("kill: %+v %v", exit, err)
			}
			j.Close()

			j, err = d.Start(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "30"}, TimeoutMs: 150}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if exit, err := j.Wait(ctx); err != nil || exit.Reason != protocol.ReasonOverallTimeout {
				t.Fatalf("timeout: %+v %v", exit, err)
			}
			j.Close()

			j, err = d.Start(ctx, protocol.SpawnArgs{Argv: []string{"cat"}, Stdin: true}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Write(ctx, []byte("typed"), true); err != nil {
				t.Fatal(err)
			}
			if out, err := readAll(t, j.Stdout()); err != nil || out != "typed" {
				t.Fatalf("stdin: %q %v", out, err)
			}
			j.Close()

			if _, err := d.Start(ctx, protocol.SpawnArgs{Argv: []string{"/nonexistent"}}, 0); protocol.CodeOf(err) != protocol.CodeSpawnError {
				t.Fatalf("spawn error: %v", err)
			}
		})
	}
}

// TestDispatcherSwitching: zmq needs a healthy supervisor; running jobs
// keep their mode.
func TestDispatcherSwitching(t *testing.T) {
	s := start(t, nil)
	origin := local.New(0)
	t.Cleanup(func() { origin.Close(context.Background()) })
	ctx := ctxT(t, 30*time.Second)
	dead := client.New(client.Options{ControlAddress: "ipc:///nonexistent/c.sock", EventAddress: "ipc:///nonexistent/e.sock", RequestTimeout: time.Second, MaxReconnectAttempts: 1})
	defer dead.Close()
	d := client.NewDispatcher(dead, origin)
	if err := d.SetMode(ctx, client.ModeZMQ); err == nil || d.Mode() != client.ModeOrigin {
		t.Fatalf("switch to zmq without a supervisor: %v, mode %s", err, d.Mode())
	}
	d = client.NewDispatcher(s.c, origin)
	j, err := d.Start(ctx, protocol.SpawnArgs{Shell: "sleep 0.3; echo origin-done"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetMode(ctx, client.ModeZMQ); err != nil || d.Mode() != client.ModeZMQ {
		t.Fatalf("switch: %v", err)
	}
	if out, _ := readAll(t, j.Stdout()); out != "origin-done\n" {
		t.Fatalf("origin job after the switch: %q", out)
	}
	if _, err := s.c.Status(ctx, j.ID); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("an origin job must not be the supervisor's: %v", err)
	}
	z, err := d.Start(ctx, protocol.SpawnArgs{Argv: []string{"true"}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Status(ctx, z.ID); err != nil {
		t.Fatalf("a zmq job is the supervisor's: %v", err)
	}
	z.Close()
	if err := d.SetMode(ctx, client.ModeOrigin); err != nil {
		t.Fatal(err)
	}
}

// TestSlowReaderGetsExplicitLoss: a reader that falls further behind than
// its buffer loses output and is told so, in band; Wait still returns.
func TestSlowReaderGetsExplicitLoss(t *testing.T) {
	s := start(t, nil)
	ctx := ctxT(t, 30*time.Second)
	j, err := s.c.Start(ctx, protocol.SpawnArgs{Shell: "head -c 200000 /dev/zero"}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if exit, err := j.Wait(ctx); err != nil || exit.Reason != protocol.ReasonExit {
		t.Fatalf("wait without reading: %+v %v", exit, err)
	}
	got, err := readAll(t, j.Stdout())
	var lost *client.OutputLostError
	if !errors.As(err, &lost) || lost.Reason != "reader-too-slow" {
		t.Fatalf("want an OutputLostError, got %v after %d bytes", err, len(got))
	}
	if len(got) > 64<<10 { // (the bound, or one event's output if larger: at most 64 KiB)
		t.Fatalf("buffered %d bytes past the 4096 bound", len(got))
	}
	if len(j.Lost()) == 0 {
		t.Fatal("losses not recorded")
	}
}

// TestFollowSurvivesEventSocketCutoff: a follower too slow for its
// subscriber queue is cut off by the supervisor; Follow reconnects and
// backfills, and every byte arrives once, in order.
func TestFollowSurvivesEventSocketCutoff(t *testing.T) {
	s := start(t, func(c *server.Config) {
		c.SubscriberQueueBytes = 64 << 10
		c.Jobs.RingBytes = 64 << 20
		c.Jobs.MergeMaxBytes = 4096
		c.MetricsAddr = "127.0.0.1:0"
	})
	ctx := ctxT(t, 60*time.Second)
	var want bytes.Buffer
	const lines = 400000
	for i := 0; i < lines; i++ {
		fmt.Fprintf(&want, "line %06d\n", i)
	}
	j, err := s.c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"seq", "-f", "line %06g", "0", fmt.Sprint(lines - 1)}})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	slow := true
	err = s.c.Follow(ctx, j.JobID, 1, func(ev protocol.Event) error {
		if ev.Kind == protocol.KindGap {
			return fmt.Errorf("unexpected loss: %s", ev.Payload)
		}
		if ev.Kind == protocol.KindStdout {
			var p protocol.OutputPayload
			if err := ev.DecodePayload(&p); err != nil {
				return err
			}
			got.Write(p.Data)
			if slow && got.Len() < 128<<10 {
				time.Sleep(20 * time.Millisecond) // a slow consumer, so that the supervisor cuts it off
			} else {
				slow = false
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("got %d bytes, want %d", got.Len(), want.Len())
	}
	if !strings.HasSuffix(got.String(), "line 399999\n") {
		t.Fatal("tail missing")
	}
	resp, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(m), `exec_supervisor_connections_rejected_total{reason="slow-subscriber"}`) {
		t.Fatal("the test must make the supervisor cut the follower off, and it did not")
	}
}

// TestPollModeFollows: the same Job API served by control-plane polling.
func TestPollModeFollows(t *testing.T) {
	s := start(t, nil)
	c := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: "ipc:///nonexistent/unused.sock",
		SubscribeMode: client.SubscribePoll, PollInterval: 20 * time.Millisecond})
	defer c.Close()
	ctx := ctxT(t, 20*time.Second)
	j, err := c.Start(ctx, protocol.SpawnArgs{Shell: "for i in 1 2 3; do echo poll-$i; sleep 0.05; done"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	out, err := readAll(t, j.Stdout())
	if err != nil || out != "poll-1\npoll-2\npoll-3\n" {
		t.Fatalf("out %q %v", out, err)
	}
	if exit, err := j.Wait(ctx); err != nil || exit.Reason != protocol.ReasonExit {
		t.Fatalf("exit %+v %v", exit, err)
	}
}

// TestClientAuditFindings: what a review of pkg/client found, each
// reproduced against a real supervisor. Follow from past a finished job's
// end invented a terminal event under a new seq; a service's Job.Wait kept
// an earlier end's exit code; Client.Close did not stop a push-mode Follow
// of a busy job; a job buffer smaller than one output chunk lost it even
// with a reader waiting; a SetMode overtaken by a later one overrode it.
func TestClientAuditFindings(t *testing.T) {
	s := start(t, nil)
	ctx := ctxT(t, 30*time.Second)

	t.Run("follow past the end", func(t *testing.T) {
		info, done, err := s.c.SpawnWait(ctx, protocol.SpawnArgs{Argv: []string{"true"}}, 10*time.Second)
		if err != nil || !done {
			t.Fatal(err)
		}
		var got []protocol.Event
		if err := s.c.Follow(ctx, info.JobID, info.LastSeq+1, func(ev protocol.Event) error { got = append(got, ev); return nil }); err != nil || len(got) != 0 {
			t.Fatalf("follow from %d: %v, events %+v", info.LastSeq+1, err, got)
		}
	})

	t.Run("service exit fields", func(t *testing.T) {
		// The first period ends at once with exit code 7 (restart-limit);
		// the second runs until killed (no exit code, a signal).
		mark := filepath.Join(t.TempDir(), "ran")
		info, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: "if [ -e " + mark + " ]; then exec sleep 300; fi; : > " + mark + "; exit 7",
			Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, MaxRestarts: ptr(1)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, done, err := s.c.Wait(ctx, info.JobID, 10*time.Second); err != nil || !done {
			t.Fatal(err)
		}
		if st, err := s.c.StartService(ctx, info.JobID); err != nil || st.State != protocol.StateRunning {
			t.Fatalf("start again: %s %v", st.State, err)
		}
		j := s.c.Open(info.JobID, 0)
		defer j.Close()
		if _, err := s.c.Kill(ctx, info.JobID, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
		exit, err := j.Wait(ctx)
		st, serr := s.c.Status(ctx, info.JobID)
		if err != nil || serr != nil || exit.ExitCode != nil || st.ExitCode != nil || exit.Reason != protocol.ReasonManualCancel || exit.Signal != "SIGKILL" {
			t.Fatalf("Job.Wait %+v (%v); status: reason %s exit code %v (%v)", exit, err, st.Reason, st.ExitCode, serr)
		}
	})

	t.Run("close stops follow", func(t *testing.T) {
		c := client.New(client.Options{ControlAddress: s.cfg.Control, EventAddress: s.cfg.Event})
		info, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "while :; do echo tick; sleep 0.05; done"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.c.Kill(context.Background(), info.JobID, "SIGKILL")
		ticks := make(chan struct{}, 1)
		res := make(chan error, 1)
		go func() {
			res <- c.Follow(ctx, info.JobID, 1, func(ev protocol.Event) error {
				if ev.Kind == protocol.KindStdout {
					select {
					case ticks <- struct{}{}:
					default:
					}
				}
				return nil
			})
		}()
		<-ticks
		c.Close()
		select {
		case err := <-res:
			if !errors.Is(err, client.ErrClosed) {
				t.Fatalf("follow after Close: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Follow of a busy job went on after Close")
		}
	})

	t.Run("a chunk larger than the buffer", func(t *testing.T) {
		// (one write(2), so one read and one event: head writes in
		// pieces, which the first-output-at-once merge may send as two
		// events, the second before the reader took the first)
		j, err := s.c.Start(ctx, protocol.SpawnArgs{Shell: "dd if=/dev/zero bs=10000 count=1 status=none"}, 4096)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		out, err := readAll(t, j.Stdout())
		if err != nil || len(out) != 10000 {
			t.Fatalf("read %d bytes: %v", len(out), err)
		}
	})

	t.Run("abandoned spawn names its job", func(t *testing.T) {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// Cancelled once the job runs (its reply is held by then).
		go func() {
			for wctx.Err() == nil {
				if jobs, err := s.c.ListJobs(ctx, protocol.ListJobsArgs{State: protocol.StateRunning}); err == nil && len(jobs) > 0 {
					cancel()
					return
				}
				time.Sleep(5 * time.Millisecond) // polling for the job
			}
		}()
		info, _, err := s.c.SpawnWait(wctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}}, time.Hour)
		var ae *client.AbandonedError
		if !errors.As(err, &ae) || !errors.Is(err, context.Canceled) || ae.JobID == "" || info.JobID != ae.JobID {
			t.Fatalf("cancelled SpawnWait: %+v, %v", info, err)
		}
		st, err := s.c.Status(ctx, info.JobID)
		if err != nil || st.State != protocol.StateRunning {
			t.Fatalf("the job: %s %v", st.State, err)
		}
		if _, err := s.c.Kill(ctx, info.JobID, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("set mode ordering", func(t *testing.T) {
		// A supervisor stand-in whose health answer we hold back.
		dir, err := os.MkdirTemp("", "d-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		ep := "ipc://" + filepath.Join(dir, "h.sock")
		r, err := zmtp.ListenRouter(ctx, ep, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		c := client.New(client.Options{ControlAddress: ep, EventAddress: ep})
		defer c.Close()
		origin := local.New(0)
		defer origin.Close(context.Background())
		d := client.NewDispatcher(c, origin)
		first := make(chan error, 1)
		go func() { first <- d.SetMode(ctx, client.ModeZMQ) }()
		in, err := r.Recv() // its health check is under way
		if err != nil {
			t.Fatal(err)
		}
		if err := d.SetMode(ctx, client.ModeOrigin); err != nil {
			t.Fatal(err)
		}
		req, err := protocol.DecodeRequest(in.Frames[len(in.Frames)-1], 0)
		if err != nil {
			t.Fatal(err)
		}
		rep, _ := protocol.OKReply(req.ID, protocol.HealthResult{OK: true})
		if err := r.Send(in.Peer, append(in.Frames[:len(in.Frames)-1:len(in.Frames)-1], rep)); err != nil {
			t.Fatal(err)
		}
		in.Peer.Release()
		if err := <-first; err == nil || d.Mode() != client.ModeOrigin {
			t.Fatalf("the earlier SetMode(zmq) finished last: %v, mode %s", err, d.Mode())
		}
	})
}

func ptr[T any](v T) *T { return &v }

// TestWriteOverLimitKeepsConnection: Client.Write of more than a write
// may carry got the connection closed ("broken pipe") instead of
// too-large.
func TestWriteOverLimitKeepsConnection(t *testing.T) {
	s := start(t, nil)
	ctx := ctxT(t, 10*time.Second)
	info, err := s.c.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.c.Kill(context.Background(), info.JobID, "SIGKILL")
	if _, err := s.c.Write(ctx, info.JobID, make([]byte, 2<<20), false); protocol.CodeOf(err) != protocol.CodeTooLarge {
		t.Fatalf("a 2 MiB write: %v", err)
	}
	if _, err := s.c.Health(ctx); err != nil {
		t.Fatalf("the connection after it: %v", err)
	}
}

// TestFollowSlowHeartbeats: with heartbeats further apart than the 3 s a
// follower allows a quiet event connection by default, the follower goes
// by the interval the supervisor announces (three of them) and keeps its
// connection through a quiet job, rather than reconnecting every 3 s.
func TestFollowSlowHeartbeats(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *server.Config) {
		c.HeartbeatInterval = 5 * time.Second
		c.MetricsAddr = "127.0.0.1:0"
	})
	ctx := ctxT(t, 30*time.Second)
	j, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 4.5; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	disconnects := func() string {
		resp, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		m, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(m), "\n") {
			if strings.HasPrefix(l, "exec_supervisor_subscriber_disconnects_total ") {
				return l
			}
		}
		return "no metric"
	}
	var at string
	start := time.Now()
	err = s.c.Follow(ctx, j.JobID, 1, func(ev protocol.Event) error {
		if ev.Kind == protocol.KindStdout {
			at = disconnects() // (before Follow closes its connection)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 4*time.Second {
		t.Fatalf("the job was quiet for %v only: the test needs more than 3 s", time.Since(start))
	}
	if at != "exec_supervisor_subscriber_disconnects_total 0" {
		t.Fatalf("the follower's event connection was dropped while the job was quiet: %s", at)
	}
	// Nor did it ask the supervisor four times a second meanwhile (its
	// safety-net backfills back off while the job is quiet).
	if n := backfills(t, s); n > 8 {
		t.Fatalf("%v subscribe requests while following a job quiet for 4.5 s", n)
	}
}

// metricsText is what the supervisor's metrics endpoint serves.
func metricsText(t *testing.T, s *supervisor) []byte {
	t.Helper()
	resp, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// backfills reads the supervisor's count of subscribe requests.
func backfills(t *testing.T, s *supervisor) float64 {
	t.Helper()
	for _, l := range strings.Split(string(metricsText(t, s)), "\n") {
		if v, ok := strings.CutPrefix(l, "exec_supervisor_backfill_requests_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no exec_supervisor_backfill_requests_total")
	return 0
}

// TestLostOutputIsCounted: output evicted from the supervisor's ring
// before a follower asked for it surfaces as an OutputLostError that says
// how many bytes were lost (subscribe's per-range bytes); what is read is
// the retained tail, and the two add up to everything printed.
func TestLostOutputIsCounted(t *testing.T) {
	t.Parallel()
	s := start(t, func(c *server.Config) {
		c.Jobs.RingBytes = 64 << 10
		c.Jobs.MergeMaxBytes = 4096
	})
	ctx := ctxT(t, 30*time.Second)
	const total = 400000
	info, err := s.c.Spawn(ctx, protocol.SpawnArgs{Shell: fmt.Sprintf("head -c %d /dev/zero", total)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.c.Wait(ctx, info.JobID, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	j := s.c.Open(info.JobID, 1<<20)
	defer j.Close()
	before, err := readAll(t, j.Stdout())
	var lost *client.OutputLostError
	if !errors.As(err, &lost) || lost.Reason != "not-retained" || before != "" {
		t.Fatalf("want an OutputLostError first, got %v after %d bytes", err, len(before))
	}
	got, err := readAll(t, j.Stdout()) // (the stream goes on after the loss)
	if err != nil {
		t.Fatalf("after the loss: %v", err)
	}
	if lost.Bytes <= 0 || lost.Bytes+int64(len(got)) != total {
		t.Fatalf("lost %d bytes and read %d: want them to add up to %d", lost.Bytes, len(got), total)
	}
}

// TestPollFollowServiceAcrossGracefulRestart: a follower that learns of a
// service's end by a backfill (poll mode always does; the safety net may)
// follows it under the next supervisor when that end was its
// supervisor's shutdown, as one that gets the end as an event does (the
// follow ended with supervisor-shutdown while the service went on).
func TestPollFollowServiceAcrossGracefulRestart(t *testing.T) {
	cfg, dir := testConfig(t)
	startSrv := func() *server.Server {
		s, err := server.New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s1 := startSrv()
	c := client.New(client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event, RequestTimeout: 5 * time.Second,
		SubscribeMode: client.SubscribePoll, PollInterval: 20 * time.Millisecond})
	defer c.Close()
	ctx := ctxT(t, 60*time.Second)
	marker := filepath.Join(dir, "second-run")
	j, err := c.Spawn(ctx, protocol.SpawnArgs{
		// (the marker made before "first" is printed: once the follower
		// sees it, a shutdown no longer stops the run before it)
		Shell:   "if [ -e " + marker + " ]; then echo second; exit 7; fi; touch " + marker + "; echo first; exec sleep 300",
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartOnFailure, MaxRestarts: ptr(1)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	var end protocol.ExitPayload
	firstSeen := make(chan struct{})
	first := false // (the follow's goroutine's)
	done := make(chan error, 1)
	go func() {
		done <- c.Follow(ctx, j.JobID, 1, func(ev protocol.Event) error {
			switch {
			case ev.Kind == protocol.KindStdout:
				p, _ := ev.Output()
				out.Write(p.Data)
				if !first && strings.Contains(out.String(), "first") {
					first = true
					close(firstSeen)
				}
			case ev.Kind.Terminal():
				end = protocol.ExitPayload{}
				_ = ev.DecodePayload(&end)
			}
			return nil
		})
	}()
	select {
	case <-firstSeen:
	case err := <-done:
		t.Fatalf("follow ended before the first run's output: %v", err)
	case <-ctx.Done():
		t.Fatal("no output from the first run")
	}
	// A job slow to end keeps the stopping supervisor answering for a
	// while after the service's end: the follower's backfills get that
	// end (supervisor-shutdown) from it.
	slow, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: `trap "sleep 0.5; exit 0" TERM; echo up; sleep 300 & wait`})
	if err != nil {
		t.Fatal(err)
	}
	for { // (its trap is set once it said so)
		p, err := c.Poll(ctx, slow.JobID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Chunks) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the slow job never started")
		case <-time.After(5 * time.Millisecond): // polling its output
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	s1.Close(cctx)
	cancel()
	s2 := startSrv()
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s2.Close(cctx)
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "second") || end.Reason != protocol.ReasonRestartLimit {
		t.Fatalf("output %q, end %+v: want the resumed run's output and its end (restart-limit)", out.String(), end)
	}
}

// TestCloseEndsConnecting: Close makes calls that are still connecting
// (a supervisor that accepts and never answers the handshake, or is not
// there and is being retried) fail at once with ErrClosed, as its doc
// says: they went on dialing and retrying for up to 10 s (found by a
// gateway-integration audit).
func TestCloseEndsConnecting(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c // (never answered: the handshake hangs)
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	addr := "tcp://" + l.Addr().String()
	c := client.New(client.Options{ControlAddress: addr, EventAddress: addr, Token: "t", RequestTimeout: 30 * time.Second,
		MaxReconnectAttempts: 10, ReconnectInterval: time.Second})
	errs := make(chan error, 2)
	go func() { _, err := c.Health(context.Background()); errs <- err }()
	go func() {
		_, _, err := c.SpawnWait(context.Background(), protocol.SpawnArgs{Argv: []string{"true"}}, 10*time.Second)
		errs <- err
	}()
	select {
	case conn := <-accepted: // a call is in its handshake
		defer conn.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no call connected")
	}
	closed := time.Now()
	c.Close()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, client.ErrClosed) {
				t.Errorf("a call in progress at Close: %v, want ErrClosed", err)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("a call still connecting did not end with Close")
		}
	}
	if d := time.Since(closed); d > 2*time.Second {
		t.Errorf("calls ended %v after Close", d)
	}
}
