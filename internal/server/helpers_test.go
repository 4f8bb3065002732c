package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/limits"
	"github.com/exec-supervisor/exec-supervisor/internal/proctest"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

func TestMain(m *testing.M) {
	limits.MaybeRunHelper() // jobs with rlimits start through this binary
	if spec := os.Getenv("ES_NOTIFY_HELPER"); spec != "" {
		os.Exit(notifyHelper(spec))
	}
	os.Exit(proctest.RunWithoutLeaks(m))
}

// testServer is a supervisor serving on private ipc endpoints of a test.
type testServer struct {
	*Server
	cfg    Config
	client *client.Client
	dir    string
}

func testConfig(t testing.TB) Config {
	t.Helper()
	dir, err := os.MkdirTemp("", "es-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := DefaultConfig()
	cfg.Control = "ipc://" + filepath.Join(dir, "c.sock")
	cfg.Event = "ipc://" + filepath.Join(dir, "e.sock")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.MetricsAddr = ""
	cfg.Jobs.MergeInterval = 20 * time.Millisecond
	cfg.Jobs.Grace = 2 * time.Second
	cfg.HeartbeatInterval = 200 * time.Millisecond
	cfg.Subreaper = false // the test process waits for children of its own
	cfg.CPUHome = false   // (per process: this one runs several servers, and its tests)
	if exe, err := os.Executable(); err == nil {
		cfg.LimitsHelper = exe // TestMain runs limits.MaybeRunHelper
	}
	return cfg
}

// eachTransport runs f in a subtest per transport, ipc and tcp (with its
// token), each against a server of its own.
func eachTransport(t *testing.T, f func(t *testing.T, cfg Config, ts *testServer)) {
	for _, transport := range []string{"ipc", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			cfg := testConfig(t)
			if transport == "tcp" {
				cfg.Control, cfg.Event = tcpPair(t)
			}
			f(t, cfg, startServer(t, cfg))
		})
	}
}

func startServer(t testing.TB, cfg Config) *testServer {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if !testing.Verbose() {
		log = slog.New(slog.DiscardHandler)
	}
	s, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: s, cfg: cfg}
	ts.client = client.New(client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event, RequestTimeout: 10 * time.Second, Token: s.token})
	t.Cleanup(func() {
		ts.client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close server: %v", err)
		}
	})
	return ts
}

// restart closes the server and starts a new one on the same
// configuration (its state directory): a supervisor restart.
func (ts *testServer) restart(t testing.TB) *testServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := ts.Server.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return startServer(t, ts.cfg)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitDone waits (via Follow, no sleeps) for the job to finish and returns
// its output by stream and the exit payload.
func waitDone(t *testing.T, c *client.Client, id string, d time.Duration) (stdout, stderr string, exit protocol.ExitPayload, events []protocol.Event) {
	t.Helper()
	var out, errb bytes.Buffer
	err := c.Follow(ctxT(t, d), id, 1, func(ev protocol.Event) error {
		events = append(events, ev)
		switch ev.Kind {
		case protocol.KindStdout, protocol.KindStderr:
			var p protocol.OutputPayload
			if err := ev.DecodePayload(&p); err != nil {
				return err
			}
			if ev.Kind == protocol.KindStdout {
				out.Write(p.Data)
			} else {
				errb.Write(p.Data)
			}
		case protocol.KindExited, protocol.KindFailed:
			return ev.DecodePayload(&exit)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow %s: %v", id, err)
	}
	return out.String(), errb.String(), exit, events
}

// requireGroupGone fails unless process group pgid has no live
// (non-zombie) member. Orphaned zombies are init's to reap.
func requireGroupGone(t *testing.T, pgid int) {
	t.Helper()
	if pgid <= 1 {
		t.Fatalf("bad pgid %d", pgid)
	}
	// A member may still be finishing its exit: the kernel takes a task
	// out of its cgroup (which then reads empty, and the job ends) a
	// moment before it becomes a zombie (do_exit: cgroup_exit, then
	// exit_notify). Anything there for longer is a survivor.
	deadline := time.Now().Add(2 * time.Second)
	for syscall.Kill(-pgid, 0) == nil {
		live := proctest.InGroup(pgid)
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live members %v", pgid, live)
		}
		time.Sleep(5 * time.Millisecond) // polling the process table; there is no event to wait on
	}
}

// eventually polls cond until it holds or d passes (for state with no
// notification, such as the kernel's process table).
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond) // polling the process table; there is no event to wait on
	}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// notifyHelper is a tiny sd_notify client run as a job (the test binary
// re-executed with ES_NOTIFY_HELPER set): it waits for a line on stdin,
// sends READY=1 with a status, then WATCHDOG=1 every period for count
// pings, then hangs without pinging (as a stuck service would).
func notifyHelper(spec string) int {
	var period time.Duration
	var count int
	if _, err := fmt.Sscanf(spec, "%d:%d", &period, &count); err != nil {
		fmt.Fprintln(os.Stderr, "notify helper: bad spec", spec, err)
		return 2
	}
	period *= time.Millisecond
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: os.Getenv("NOTIFY_SOCKET"), Net: "unixgram"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "notify helper:", err)
		return 2
	}
	fmt.Println("waiting for go")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "notify helper: stdin:", err)
		return 2
	}
	if _, err := conn.Write([]byte("READY=1\nSTATUS=serving")); err != nil {
		fmt.Fprintln(os.Stderr, "notify helper:", err)
		return 2
	}
	fmt.Println("ready sent")
	for i := 0; i < count; i++ {
		time.Sleep(period) // a service's own ping period, not test synchronisation
		if _, err := conn.Write([]byte("WATCHDOG=1")); err != nil {
			fmt.Fprintln(os.Stderr, "notify helper:", err)
			return 2
		}
	}
	fmt.Println("hanging")
	time.Sleep(time.Hour) // hung: no more pings
	return 0
}
