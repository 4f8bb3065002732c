package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp/zmq4peer"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func TestDirectExit(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 10*time.Second)
	job, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 0"}})
	if err != nil {
		t.Fatal(err)
	}
	if job.Pid == 0 || job.Pgid != job.Pid {
		t.Fatalf("want own process group (pid == pgid), got pid %d pgid %d", job.Pid, job.Pgid)
	}
	out, errs, exit, events := waitDone(t, ts.client, job.JobID, 10*time.Second)
	if out != "out\n" || errs != "err\n" {
		t.Fatalf("output: stdout %q stderr %q", out, errs)
	}
	if exit.Reason != protocol.ReasonExit || exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Fatalf("exit: %+v", exit)
	}
	// seqs are contiguous from 1; started first, exit last.
	for i, ev := range events {
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, ev.Seq)
		}
	}
	if events[0].Kind != protocol.KindStarted || events[len(events)-1].Kind != protocol.KindExited {
		t.Fatalf("first %s last %s", events[0].Kind, events[len(events)-1].Kind)
	}
	info, err := ts.client.Status(ctx, job.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != protocol.StateExited || info.Reason != protocol.ReasonExit || info.StdoutBytes != 4 || info.StderrBytes != 4 {
		t.Fatalf("status: %+v", info)
	}
	requireGroupGone(t, job.Pgid)
}

func TestNonZeroExitAndSignal(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 10*time.Second)
	job, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "exit 7"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, exit, _ := waitDone(t, ts.client, job.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonExit || exit.ExitCode == nil || *exit.ExitCode != 7 {
		t.Fatalf("exit 7: %+v", exit)
	}
	job, err = ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "kill -9 $$"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, exit, events := waitDone(t, ts.client, job.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonSignal || exit.Signal != "SIGKILL" || exit.ExitCode != nil {
		t.Fatalf("signal: %+v", exit)
	}
	if events[len(events)-1].Kind != protocol.KindFailed {
		t.Fatalf("death by signal must be job.failed, got %s", events[len(events)-1].Kind)
	}
}

func TestManualCancelKillsWholeTree(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 20*time.Second)
	// The shell and both sleeps ignore nothing: SIGTERM ends them. A
	// TERM-ignoring grandchild must still die by SIGKILL after the grace.
	job, err := ts.client.Spawn(ctx, protocol.SpawnArgs{
		Shell:   "sleep 300 & sleep 300 & sh -c 'trap \"\" TERM; echo ready; while :; do sleep 1; done' & wait",
		GraceMs: 300,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the grandchild to be up (its output is the event).
	got := make(chan struct{})
	go func() {
		_ = ts.client.Follow(ctx, job.JobID, 1, func(ev protocol.Event) error {
			if ev.Kind == protocol.KindStdout {
				close(got)
				return errors.New("stop")
			}
			return nil
		})
	}()
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("no output from the tree")
	}
	if n := len(proctest.InGroup(job.Pgid)); n < 4 {
		t.Fatalf("want shell + 3 descendants in the group, got %d", n)
	}
	res, err := ts.client.Kill(ctx, job.JobID, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.AlreadyFinished {
		t.Fatal("kill says already finished")
	}
	// Duplicate kills are idempotent.
	if _, err := ts.client.Kill(ctx, job.JobID, ""); err != nil {
		t.Fatal(err)
	}
	_, _, exit, _ := waitDone(t, ts.client, job.JobID, 15*time.Second)
	if exit.Reason != protocol.ReasonManualCancel {
		t.Fatalf("reason %s", exit.Reason)
	}
	requireGroupGone(t, job.Pgid)
	res, err = ts.client.Kill(ctx, job.JobID, "")
	if err != nil || !res.AlreadyFinished || res.Job.Reason != protocol.ReasonManualCancel {
		t.Fatalf("kill after end: %+v %v", res, err)
	}
}

func TestLeaderExitClearsBackgroundDescendants(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 20*time.Second)
	// The leader exits at once, leaving a background sleep holding stdout.
	job, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 300 & echo bye", GraceMs: 500})
	if err != nil {
		t.Fatal(err)
	}
	out, _, exit, _ := waitDone(t, ts.client, job.JobID, 15*time.Second)
	if out != "bye\n" || exit.Reason != protocol.ReasonExit || *exit.ExitCode != 0 {
		t.Fatalf("out %q exit %+v", out, exit)
	}
	requireGroupGone(t, job.Pgid)
}

func TestTimeouts(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 20*time.Second)
	overall, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}, TimeoutMs: 200})
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "echo once; exec sleep 300", NoOutputTimeoutMs: 300})
	if err != nil {
		t.Fatal(err)
	}
	// Prints every 100 ms for ~2.5 s: over twice its no-output timeout,
	// and must never be killed by it. (The timeout is ten ticks long: with
	// 300 ms, one tick late by 240 ms on a loaded machine ended it.)
	chatty, err := ts.client.Spawn(ctx, protocol.SpawnArgs{
		Shell:             "i=0; while [ $i -lt 25 ]; do echo tick $i; sleep 0.1; i=$((i+1)); done",
		NoOutputTimeoutMs: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, exit, _ := waitDone(t, ts.client, overall.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonOverallTimeout || exit.Signal != "SIGTERM" {
		t.Fatalf("overall: %+v", exit)
	}
	out, _, exit, _ := waitDone(t, ts.client, quiet.JobID, 10*time.Second)
	if exit.Reason != protocol.ReasonNoOutputTimeout || out != "once\n" {
		t.Fatalf("no-output: %+v out %q", exit, out)
	}
	out, _, exit, _ = waitDone(t, ts.client, chatty.JobID, 15*time.Second)
	if exit.Reason != protocol.ReasonExit || strings.Count(out, "tick") != 25 {
		t.Fatalf("chatty: %+v out %q", exit, out)
	}
	for _, j := range []protocol.JobInfo{overall, quiet, chatty} {
		requireGroupGone(t, j.Pgid)
	}
}

func TestSpawnErrors(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 10*time.Second)
	cases := []struct {
		name string
		args protocol.SpawnArgs
		code protocol.Code
		msg  string
	}{
		{"missing binary", protocol.SpawnArgs{Argv: []string{"/nonexistent/binary"}}, protocol.CodeSpawnError, "no such file"},
		{"not in PATH", protocol.SpawnArgs{Argv: []string{"no-such-command-xyz"}}, protocol.CodeSpawnError, "not found in PATH"},
		{"bad cwd", protocol.SpawnArgs{Argv: []string{"true"}, Cwd: "/nonexistent/dir"}, protocol.CodeSpawnError, "working directory"},
		{"cwd is a file", protocol.SpawnArgs{Argv: []string{"true"}, Cwd: "/etc/passwd"}, protocol.CodeSpawnError, "not a directory"},
		{"empty argv", protocol.SpawnArgs{}, protocol.CodeInvalidArgument, "argv or shell"},
		{"empty argv0", protocol.SpawnArgs{Argv: []string{""}}, protocol.CodeInvalidArgument, "argv[0]"},
		{"argv and shell", protocol.SpawnArgs{Argv: []string{"true"}, Shell: "true"}, protocol.CodeInvalidArgument, "not both"},
		{"negative timeout", protocol.SpawnArgs{Argv: []string{"true"}, TimeoutMs: -1}, protocol.CodeInvalidArgument, "negative"},
		{"negative no-output", protocol.SpawnArgs{Argv: []string{"true"}, NoOutputTimeoutMs: -5}, protocol.CodeInvalidArgument, "negative"},
		{"bad env key", protocol.SpawnArgs{Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}}, protocol.CodeInvalidArgument, "env key"},
		{"bad env mode", protocol.SpawnArgs{Argv: []string{"true"}, EnvMode: "weird"}, protocol.CodeInvalidArgument, "envMode"},
		{"NUL in argv", protocol.SpawnArgs{Argv: []string{"true", "a\x00b"}}, protocol.CodeInvalidArgument, "NUL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ts.client.Spawn(ctx, tc.args)
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != tc.code || !strings.Contains(pe.Message, tc.msg) {
				t.Fatalf("want %s containing %q, got %v", tc.code, tc.msg, err)
			}
			if tc.code == protocol.CodeSpawnError {
				id := pe.Details["jobId"]
				info, err := ts.client.Status(ctx, id)
				if err != nil || info.Reason != protocol.ReasonSpawnError || info.Error == "" {
					t.Fatalf("spawn-error job %q: %+v %v", id, info, err)
				}
			}
		})
	}
	// The server still serves.
	if _, err := ts.client.Health(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestEnvAndCwd(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 10*time.Second)
	dir := t.TempDir()
	job, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: `echo "$FOO|$HOME|$(pwd)"`, Cwd: dir, Env: map[string]string{"FOO": "bar"}})
	if err != nil {
		t.Fatal(err)
	}
	out, _, _, _ := waitDone(t, ts.client, job.JobID, 10*time.Second)
	if want := "bar|" + os.Getenv("HOME") + "|" + dir + "\n"; out != want {
		t.Fatalf("inherit: got %q want %q", out, want)
	}
	job, err = ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"/usr/bin/env"}, EnvMode: protocol.EnvReplace, Env: map[string]string{"ONLY": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	out, _, _, _ = waitDone(t, ts.client, job.JobID, 10*time.Second)
	// (and the job's mark, always: see jobs.WithMark)
	if want := "ONLY=1\n" + proc.EnvJobID + "=" + job.JobID + "\n" + proc.EnvStateID + "=" + ts.Server.mark + "\n"; out != want {
		t.Fatalf("replace: %q, want %q", out, want)
	}
}

func TestLargeOutputRingKeepsTail(t *testing.T) {
	if testing.Short() {
		t.Skip("100 MB of output: skipped with -short")
	}
	cfg := testConfig(t)
	cfg.Jobs.RingBytes = 1 << 20
	ts := startServer(t, cfg)
	ctx := ctxT(t, 120*time.Second)
	const total = 100 << 20
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	// 100 MiB of zeros, then a recognisable tail.
	job, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: fmt.Sprintf("head -c %d /dev/zero; printf THE-END", total)})
	if err != nil {
		t.Fatal(err)
	}
	var peak uint64
	var info protocol.JobInfo
	for {
		info, err = ts.client.Status(ctx, job.JobID)
		if err != nil {
			t.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
		if info.Finished() {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("job did not finish")
		case <-time.After(50 * time.Millisecond): // sampling heap while the job runs
		}
	}
	if info.StdoutBytes != total+7 {
		t.Fatalf("stdout bytes %d", info.StdoutBytes)
	}
	res, err := ts.client.Poll(ctx, job.JobID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.LostBytes != res.Job.RetainedFrom || res.LostBytes < total-(1<<20) {
		t.Fatalf("poll from 0: truncated %v lost %d retainedFrom %d", res.Truncated, res.LostBytes, res.Job.RetainedFrom)
	}
	var buf bytes.Buffer
	for _, c := range res.Chunks {
		buf.Write(c.Data)
	}
	if !bytes.HasSuffix(buf.Bytes(), []byte("THE-END")) || int64(buf.Len()) != total+7-res.Job.RetainedFrom {
		t.Fatalf("tail: %d bytes, suffix %q", buf.Len(), buf.Bytes()[max(0, buf.Len()-10):])
	}
	if buf.Len() > 1<<20 {
		t.Fatalf("retained %d bytes > ring size", buf.Len())
	}
	// Heap growth stays far below the 100 MiB printed (ring 1 MiB + queue).
	if grow := int64(peak) - int64(before.HeapInuse); grow > 96<<20 {
		t.Fatalf("heap grew by %d MiB while the job printed 100 MiB", grow>>20)
	}
	t.Logf("heap in use: before %d MiB, peak %d MiB", before.HeapInuse>>20, peak>>20)
	// A poll from inside the retained window is not truncated.
	res2, err := ts.client.Poll(ctx, job.JobID, res.Job.OutputEnd-3, 0)
	if err != nil || res2.Truncated || len(res2.Chunks) != 1 || string(res2.Chunks[0].Data) != "END" {
		t.Fatalf("poll tail: %+v %v", res2.Chunks, err)
	}
}

func TestMaxJobsAndUnknownJob(t *testing.T) {
	cfg := testConfig(t)
	cfg.Jobs.MaxJobs = 2
	ts := startServer(t, cfg)
	ctx := ctxT(t, 20*time.Second)
	var ids []string
	for i := 0; i < 2; i++ {
		j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.JobID)
	}
	_, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}})
	if protocol.CodeOf(err) != protocol.CodeTooManyJobs {
		t.Fatalf("want too-many-jobs, got %v", err)
	}
	if err := ts.client.Remove(ctx, ids[0]); protocol.CodeOf(err) != protocol.CodeJobRunning {
		t.Fatalf("remove running: %v", err)
	}
	for _, id := range ids {
		if _, err := ts.client.Kill(ctx, id, "SIGKILL"); err != nil {
			t.Fatal(err)
		}
		_, _, exit, _ := waitDone(t, ts.client, id, 10*time.Second)
		if exit.Reason != protocol.ReasonManualCancel || exit.Signal != "SIGKILL" {
			t.Fatalf("SIGKILL kill: %+v", exit)
		}
	}
	// Room again.
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, ts.client, j.JobID, 10*time.Second)
	for _, op := range []func() error{
		func() error { _, err := ts.client.Status(ctx, "j-nope"); return err },
		func() error { _, err := ts.client.Poll(ctx, "j-nope", 0, 0); return err },
		func() error { _, err := ts.client.Kill(ctx, "j-nope", ""); return err },
		func() error { return ts.client.Remove(ctx, "j-nope") },
		func() error { _, err := ts.client.Subscribe(ctx, "j-nope", 1, 0); return err },
	} {
		if err := op(); protocol.CodeOf(err) != protocol.CodeNotFound {
			t.Fatalf("unknown job: want not-found, got %v", err)
		}
	}
	if err := ts.client.Remove(ctx, j.JobID); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Status(ctx, j.JobID); protocol.CodeOf(err) != protocol.CodeNotFound {
		t.Fatalf("removed job still there: %v", err)
	}
}

// rawCall sends one body over a fresh DEALER (REQ envelope) and returns the reply.
func rawCall(t *testing.T, ts *testServer, frames ...[]byte) *protocol.Reply {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := zmq4peer.DialToken(ctx, zmq4peer.Dealer, ts.cfg.Control, 2*time.Second, ts.token)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(zmq4peer.NewMsg(frames...)); err != nil {
		t.Fatal(err)
	}
	ch := make(chan zmq4peer.Msg, 1)
	go func() {
		m, err := s.Recv()
		if err == nil {
			ch <- m
		}
	}()
	select {
	case m := <-ch:
		rep, err := protocol.DecodeReply(m.Frames[len(m.Frames)-1])
		if err != nil {
			t.Fatal(err)
		}
		return rep
	case <-time.After(5 * time.Second):
		t.Fatal("no reply")
	}
	return nil
}

func TestMalformedRequests(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxRequestBytes = 64 << 10
	ts := startServer(t, cfg)
	ctx := ctxT(t, 20*time.Second)
	running, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "echo alive; exec sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	enc := func(v any) []byte { b, _ := protocol.Marshal(v); return b }
	cases := []struct {
		name   string
		frames [][]byte
		code   protocol.Code
	}{
		{"garbage", [][]byte{nil, []byte("\xc1\xff not msgpack")}, protocol.CodeBadRequest},
		{"empty body", [][]byte{nil, {}}, protocol.CodeBadRequest},
		{"not a map", [][]byte{nil, enc([]int{1, 2, 3})}, protocol.CodeBadRequest},
		{"wrong version", [][]byte{nil, enc(map[string]any{"v": 1, "id": "x", "op": "health"})}, protocol.CodeUnsupportedVersion},
		{"unknown op", [][]byte{nil, enc(map[string]any{"v": 2, "id": "x", "op": "format-disk"})}, protocol.CodeUnknownOp},
		{"no op", [][]byte{nil, enc(map[string]any{"v": 2, "id": "x"})}, protocol.CodeBadRequest},
		{"wrong type", [][]byte{nil, enc(map[string]any{"v": "two", "op": "health"})}, protocol.CodeBadRequest},
		{"args wrong type", [][]byte{nil, enc(map[string]any{"v": 2, "op": "spawn", "args": map[string]any{"argv": 5}})}, protocol.CodeBadRequest},
		{"args not a map", [][]byte{nil, enc(map[string]any{"v": 2, "op": "kill", "args": "x"})}, protocol.CodeBadRequest},
		{"oversized", [][]byte{nil, bytes.Repeat([]byte{'a'}, 100<<10)}, protocol.CodeTooLarge},
		{"too many frames", [][]byte{nil, []byte("a"), []byte("b")}, protocol.CodeBadRequest},
		{"bare dealer garbage", [][]byte{[]byte("zz")}, protocol.CodeBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := rawCall(t, ts, tc.frames...)
			if rep.OK || rep.Error == nil || rep.Error.Code != tc.code {
				t.Fatalf("want %s, got %+v", tc.code, rep.Error)
			}
		})
	}
	// Everyone else is still served, and the running job is untouched.
	if _, err := ts.client.Health(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := ts.client.Status(ctx, running.JobID)
	if err != nil || info.State != protocol.StateRunning {
		t.Fatalf("running job: %+v %v", info, err)
	}
}

// TestREQAndDEALERClients serves a plain zmq4 REQ client, a bare DEALER
// (no delimiter frame) and DEALERs with many requests in flight at once.
func TestREQAndDEALERClients(t *testing.T) {
	eachTransport(t, func(t *testing.T, cfg Config, ts *testServer) {
		transport := strings.SplitN(cfg.Control, ":", 2)[0]
		ctx := ctxT(t, 20*time.Second)

		// REQ: one request, one reply, with the REQ envelope.
		sctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := zmq4peer.DialToken(sctx, zmq4peer.Req, cfg.Control, 2*time.Second, ts.token)
		if err != nil {
			t.Fatal(err)
		}
		defer req.Close()
		for i := 0; i < 3; i++ {
			body, _ := protocol.EncodeRequest(fmt.Sprint("req-", i), protocol.OpHealth, nil)
			if err := req.Send(zmq4peer.NewMsg(body)); err != nil {
				t.Fatal(err)
			}
			m, err := req.Recv()
			if err != nil {
				t.Fatal(err)
			}
			rep, err := protocol.DecodeReply(m.Frames[0])
			if err != nil || !rep.OK || rep.ID != fmt.Sprint("req-", i) {
				t.Fatalf("REQ reply %d: %+v %v", i, rep, err)
			}
		}
		// Bare DEALER: [body] in, [body] out.
		body, _ := protocol.EncodeRequest("bare", protocol.OpHealth, nil)
		if rep := rawCall(t, ts, body); !rep.OK || rep.ID != "bare" {
			t.Fatalf("bare dealer: %+v", rep)
		}
		// DEALER via pkg/client: 3 goroutines x 30 requests in flight.
		var wg sync.WaitGroup
		errs := make(chan error, 90)
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 30; i++ {
					if _, err := ts.client.Health(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// A job end to end over this transport.
		j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"echo", transport}})
		if err != nil {
			t.Fatal(err)
		}
		if out, _, _, _ := waitDone(t, ts.client, j.JobID, 10*time.Second); out != transport+"\n" {
			t.Fatalf("output %q", out)
		}
	})
}

// tcpPair returns two distinct free tcp endpoints on 127.0.0.1 (both
// listeners are held open until both ports are known, so they differ).
func tcpPair(t testing.TB) (string, string) {
	t.Helper()
	var eps []string
	for i := 0; i < 2; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		eps = append(eps, fmt.Sprintf("tcp://127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port))
	}
	return eps[0], eps[1]
}

func TestShutdownTerminatesJobs(t *testing.T) {
	cfg := testConfig(t)
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := client.New(client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event})
	defer c.Close()
	ctx := ctxT(t, 20*time.Second)
	j, err := c.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 300 & sleep 300 & wait"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	requireGroupGone(t, j.Pgid)
	if _, err := os.Stat(strings.TrimPrefix(cfg.Control, "ipc://")); !os.IsNotExist(err) {
		t.Fatalf("control socket file left behind: %v", err)
	}
	// A second Close is a no-op.
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStaleSocketAndSecondServer(t *testing.T) {
	cfg := testConfig(t)
	// A stale socket file from a dead process is replaced.
	path := strings.TrimPrefix(cfg.Control, "ipc://")
	if err := os.MkdirAll(strings.TrimSuffix(path, "/c.sock"), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	ts := startServer(t, cfg)
	if _, err := ts.client.Health(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// A second server on the same live endpoints refuses to start.
	s2, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second server: %v", err)
	}
}

// TestJournalWriteFailuresAreSurvived: a journal that cannot be written
// (its directory gone) is logged and counted, and health says so until a
// write lands again; the supervisor keeps serving.
func TestJournalWriteFailuresAreSurvived(t *testing.T) {
	cfg := testConfig(t)
	dir := filepath.Join(t.TempDir(), "journal-dir")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.Journal = filepath.Join(dir, "journal.json")
	ts := startServer(t, cfg)
	ctx := ctxT(t, 20*time.Second)
	if h, err := ts.client.Health(ctx); err != nil || h.JournalError != "" {
		t.Fatalf("health with a journal that is written: %+v, %v", h, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"echo", "still-works"}})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _, _ := waitDone(t, ts.client, j.JobID, 10*time.Second); out != "still-works\n" {
		t.Fatalf("output %q", out)
	}
	eventually(t, 10*time.Second, "health to say the journal is not written", func() bool {
		h, err := ts.client.Health(ctx)
		return err == nil && strings.Contains(h.JournalError, "not written since") && ts.jw.journal.Failures.Load() > 0
	})
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "health to see journal writes recover", func() bool {
		h, err := ts.client.Health(ctx)
		return err == nil && h.JournalError == ""
	})
}

// TestResourceUsage: status and list-jobs report the whole process tree's
// processes, RSS and CPU.
func TestResourceUsage(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 20*time.Second)
	tree, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "sleep 30 & sleep 30 & wait"})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Shell: "while :; do :; done"})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.client.Kill(ctx, tree.JobID, "SIGKILL")
	defer ts.client.Kill(ctx, busy.JobID, "SIGKILL")
	eventually(t, 10*time.Second, "three processes in the tree", func() bool {
		info, err := ts.client.Status(ctx, tree.JobID)
		return err == nil && info.Usage != nil && info.Usage.Processes == 3 && info.Usage.RSSBytes > 0
	})
	eventually(t, 10*time.Second, "the busy loop to use CPU", func() bool {
		info, err := ts.client.Status(ctx, busy.JobID)
		return err == nil && info.Usage != nil && info.Usage.CPUSeconds > 0.05 && info.Usage.CPUPercent > 10
	})
	jobs, err := ts.client.ListJobs(ctx, protocol.ListJobsArgs{State: protocol.StateRunning})
	if err != nil || len(jobs) != 2 || jobs[0].Usage == nil || jobs[1].Usage == nil {
		t.Fatalf("list-jobs usage: %+v %v", jobs, err)
	}
}

// TestStateDirOfOthersRefused: a state directory another user made, or
// can write to, is refused at start (its journal says which services to
// run: a security audit ran a command as root through a planted one).
func TestStateDirOfOthersRefused(t *testing.T) {
	for _, how := range []string{"world-writable", "another owner"} {
		t.Run(how, func(t *testing.T) {
			cfg := testConfig(t)
			if err := os.Mkdir(cfg.StateDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if how == "world-writable" {
				if err := os.Chmod(cfg.StateDir, 0o777); err != nil {
					t.Fatal(err)
				}
			} else {
				if os.Geteuid() != 0 {
					t.Skip("needs root to give the directory to another user")
				}
				if err := os.Chown(cfg.StateDir, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			s, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(context.Background()); err == nil {
				s.Close(context.Background())
				t.Fatal("started on it")
			} else if !strings.Contains(err.Error(), "--state-dir") {
				t.Fatalf("error does not name the option: %v", err)
			}
		})
	}
}

// TestUnreadableJournalNotOverwritten: a journal the supervisor cannot
// read is moved aside before anything is written (the first write used to
// replace it, losing the record of the jobs a crashed run left running);
// one it cannot move aside either stops the start, naming the journal.
func TestUnreadableJournalNotOverwritten(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(filepath.Dir(cfg.JournalPath()), 0o700); err != nil {
		t.Fatal(err)
	}
	// Unreadable: a directory where the file should be (EISDIR on read),
	// with something in it to recognise.
	if err := os.Mkdir(cfg.JournalPath(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.JournalPath(), "mark"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, cfg)
	if _, err := ts.client.Health(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	aside, _ := filepath.Glob(cfg.JournalPath() + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v", aside)
	}
	if _, err := os.Stat(filepath.Join(aside[0], "mark")); err != nil {
		t.Fatalf("what was there is not kept: %v", err)
	}

	t.Run("cannot be moved aside", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to bind-mount on the journal's path (a mount point cannot be renamed)")
		}
		cfg := testConfig(t)
		path := cfg.JournalPath()
		if err := os.MkdirAll(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(t.TempDir(), path, "", syscall.MS_BIND, ""); err != nil {
			t.Skipf("cannot bind-mount here (%v)", err)
		}
		defer syscall.Unmount(path, syscall.MNT_DETACH)
		s, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(context.Background()); err == nil {
			s.Close(context.Background())
			t.Fatal("started over a journal it can neither read nor move aside")
		} else if !strings.Contains(err.Error(), "journal") || !strings.Contains(err.Error(), "moved aside") {
			t.Fatalf("error does not say what is wrong: %v", err)
		}
		if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
			t.Fatalf("the journal's path was changed: %v", err)
		}
	})
}

// TestFailedStartLeavesNoCgroup: a start that fails after the job cgroup
// base was made (here: the control endpoint is taken) removes it (an
// empty exec-supervisor-<hash> directory was left behind).
func TestFailedStartLeavesNoCgroup(t *testing.T) {
	cfg := testConfig(t)
	first := startServer(t, cfg)
	h, err := first.client.Health(ctxT(t, 5*time.Second))
	if err != nil || !h.Cgroups {
		t.Skipf("no cgroup per job here (%v)", err)
	}
	second := cfg
	second.StateDir = cfg.StateDir + "-2"
	s, err := New(second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil {
		s.Close(context.Background())
		t.Fatal("two supervisors on one control endpoint")
	}
	if s.cgroupBase == nil {
		t.Skip("the failed start made no cgroup base")
	}
	if _, err := os.Stat(s.cgroupBase.Dir); !os.IsNotExist(err) {
		t.Fatalf("cgroup base %s left behind: %v", s.cgroupBase.Dir, err)
	}
}

// TestListJobsIDPrefix: list-jobs filters by the start of the job id (as
// execctl resolves abbreviated ids); an over-long prefix is refused.
func TestListJobsIDPrefix(t *testing.T) {
	t.Parallel()
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 10*time.Second)
	var ids []string
	for range 3 {
		j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.JobID)
	}
	for _, id := range ids {
		r, err := ts.client.ListJobsPage(ctx, protocol.ListJobsArgs{IDPrefix: id[:10], Brief: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range r.Jobs {
			if !strings.HasPrefix(j.JobID, id[:10]) {
				t.Fatalf("prefix %s listed %s", id[:10], j.JobID)
			}
		}
		if !slices.ContainsFunc(r.Jobs, func(j protocol.JobInfo) bool { return j.JobID == id }) {
			t.Fatalf("prefix %s did not list %s: %+v", id[:10], id, r.Jobs)
		}
	}
	if r, err := ts.client.ListJobsPage(ctx, protocol.ListJobsArgs{IDPrefix: "j-zzzz"}); err != nil || len(r.Jobs) != 0 {
		t.Fatalf("a prefix of no job: %+v %v", r.Jobs, err)
	}
	if _, err := ts.client.ListJobsPage(ctx, protocol.ListJobsArgs{IDPrefix: strings.Repeat("a", 200)}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("an over-long prefix: %v", err)
	}
}
