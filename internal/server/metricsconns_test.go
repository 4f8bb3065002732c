package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/metrics"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// metricsHog is a local user's program that opens n connections to
// /metrics one after another (after a line on stdin), sends one GET on
// each and keeps them all open. It prints "HELD ok=A refused=R" (A got a reply, R were closed
// unanswered), and after a line on stdin checks each one: "CLOSED c
// OPEN o" (o still open 2 s later).
const metricsHog = `
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.stdin.readline()
socks, ok, refused = [], 0, 0
for i in range(n):
    s = socket.create_connection((host, port), timeout=10)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        if s.recv(64).startswith(b"HTTP/1.1 200"):
            ok += 1
        else:
            refused += 1
    except OSError:
        refused += 1
    socks.append(s)
print("HELD ok=%d refused=%d" % (ok, refused), flush=True)
sys.stdin.readline()
closed = still = 0
for s in socks:
    s.settimeout(2)
    try:
        while s.recv(65536):
            pass
        closed += 1
    except socket.timeout:
        still += 1
    except OSError:
        closed += 1
print("CLOSED %d OPEN %d" % (closed, still), flush=True)
`

// hogCommand runs metricsHog as uid 65534 when this test may (root, with
// setpriv), as this user otherwise; "" when there is no python3.
func hogCommand(ctx context.Context, args ...string) (*exec.Cmd, string) {
	py := "/usr/bin/python3" // (readable by any uid, unlike a per-user install)
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			return nil, ""
		}
	}
	args = append([]string{"-c", metricsHog}, args...)
	if setpriv, err := exec.LookPath("setpriv"); err == nil && os.Geteuid() == 0 {
		return exec.CommandContext(ctx, setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", py}, args...)...), "uid 65534"
	}
	return exec.CommandContext(ctx, py, args...), "this uid"
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestMetricsIdleConnectionsBounded: another local user opening far
// more /metrics connections than --metrics-max-connections, one GET on
// each then idle, holds at most that many of the supervisor's
// descriptors (the rest are closed at once and counted), and only until
// the idle timeout; spawn and health work meanwhile.
func TestMetricsIdleConnectionsBounded(t *testing.T) {
	const n, limit = 500, 16
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.MetricsMaxConns = limit
	cfg.MetricsIdleTimeout = time.Second
	ts := startServer(t, cfg)
	// (A first job sets up what every later one reuses: cgroup pool...)
	spawnTrue(t, ts, "before the attack")
	host, port, _ := net.SplitHostPort(ts.MetricsAddr().String())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, who := hogCommand(ctx, host, port, strconv.Itoa(n))
	if cmd == nil {
		t.Skip("no python3 to open the connections from another process")
	}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	base := openFDs(t) // (with the pipes to the attacker)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}

	// The most descriptors this process held while the attack lasted.
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if n := int64(openFDs(t)); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond): // sampling: nothing to wait on
			}
		}
	}()
	stopSampling := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopSampling()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("attacker (%s) gave no result: %s", who, stderr.String())
	}
	held := lines.Text()
	var ok, refused int
	if _, err := fmt.Sscanf(held, "HELD ok=%d refused=%d", &ok, &refused); err != nil || ok+refused != n {
		t.Fatalf("attacker (%s): %q %s", who, held, stderr.String())
	}
	t.Logf("%d connections to /metrics from %s: %d answered, %d closed at once", n, who, ok, refused)
	defer func() { t.Logf("descriptors: %d before, at most %d during the attack", base, peak.Load()) }()

	// Spawn and health work while the attacker holds its connections.
	if _, err := ts.client.Health(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("health during the attack: %v", err)
	}
	spawnTrue(t, ts, "during the attack")

	// Idle connections are given up: this process's descriptors come back
	// to what they were while the attacker still holds every socket.
	eventually(t, 20*time.Second, "idle /metrics connections closed", func() bool { return openFDs(t) <= base+2 })
	stopSampling()
	// (Beside the connections: the job spawned meanwhile, up to 9, and
	// one being refused.)
	if p := int(peak.Load()); p > base+limit+16 {
		t.Fatalf("%d descriptors open during the attack, %d before: want at most --metrics-max-connections (%d) more", p, base, limit)
	}
	if refused < n/2 {
		t.Fatalf("only %d of %d connections refused at a limit of %d", refused, n, limit)
	}
	if v := value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", metrics.RejectMetricsConns); int(v) < refused {
		t.Fatalf("connections_rejected_total{reason=%q} = %v, want %d at least", metrics.RejectMetricsConns, v, refused)
	}
	if _, err := io.WriteString(stdin, "check\n"); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || lines.Text() != fmt.Sprintf("CLOSED %d OPEN 0", n) {
		t.Fatalf("attacker's connections after the idle timeout: %q %s", lines.Text(), stderr.String())
	}
	// And /metrics still answers.
	if v := value(scrape(t, ts.MetricsAddr().String()), "exec_supervisor_jobs_spawned_total"); v != 2 {
		t.Fatalf("scrape after the attack: jobs_spawned_total %v", v)
	}
}

func spawnTrue(t *testing.T, ts *testServer, when string) {
	t.Helper()
	info, done, err := ts.client.SpawnWait(ctxT(t, 20*time.Second), protocol.SpawnArgs{Argv: []string{"/bin/true"}}, 10*time.Second)
	if err != nil || !done || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Fatalf("spawn %s: %+v finished %v, %v", when, info, done, err)
	}
}
