package server

import (
	"bufio"
	"context"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestUnauthenticatedHandshakesNoLockout: a peer without the token holding
// 1,100 connections in the handshake against tcp, reopening each as it is
// cut, does not keep out the clients that have the token: each of them
// gets health answered within 1 s (they got in 4-5 times in ~23, and
// execctl health never, when handshakes took connection slots).
func TestUnauthenticatedHandshakesNoLockout(t *testing.T) {
	cfg := testConfig(t)
	cfg.Control, cfg.Event = tcpPair(t)
	cfg.HandshakeTimeout = time.Second // (cut sooner: the attacker reopens more often)
	ts := startServer(t, cfg)
	_, addr, _ := zmtp.Split(cfg.Control)

	const held = 1100
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	for range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue // (the backlog is full: try again)
				}
				mu.Lock()
				open[c] = true
				mu.Unlock()
				// Our signature, then silence; reopened once cut.
				_, _ = c.Write(greeting("PLAIN")[:10])
				buf := make([]byte, 256)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				mu.Lock()
				delete(open, c)
				mu.Unlock()
				c.Close()
			}
		}()
	}
	defer func() {
		close(stop)
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	eventually(t, 20*time.Second, "the attacker's connections open", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(open) >= held*9/10
	})
	for i := range 10 {
		c := client.New(client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event, Token: ts.token,
			RequestTimeout: time.Second, MaxReconnectAttempts: 1})
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Health(ctx)
		cancel()
		c.Close()
		if err != nil {
			t.Fatalf("authenticated health %d during the attack: %v (after %v)", i, err, time.Since(start))
		}
	}
	if v := value(scrape2(t, ts), "exec_supervisor_connections_rejected_total", "reason", "handshake-displaced"); v < 1 {
		t.Fatalf("displaced handshakes not counted: %v", v)
	}
}

// TestOperatorGetsInWhenAllBusy: another allowed uid holding a wait on
// every connection slot (1,030 tried, --max-connections 1024: nothing idle
// to give up) does not lock out the supervisor's own user: a peer of our
// uid takes one of the slots kept past the limit for it.
func TestOperatorGetsInWhenAllBusy(t *testing.T) {
	nobody, py := testenv.Nobody(t)
	cfg := testConfig(t)
	cfg.AllowUIDs = []int{65534}
	ts := startServer(t, cfg)
	job, err := ts.client.Spawn(ctxT(t, 5*time.Second), protocol.SpawnArgs{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	req, err := protocol.EncodeRequest("w", protocol.OpWait, &protocol.WaitArgs{JobID: job.JobID, WaitMs: protocol.MaxWaitMs})
	if err != nil || len(req) > 255 {
		t.Fatalf("wait request: %v (%d bytes)", err, len(req))
	}
	// Each connection: a NULL handshake as a DEALER, then the wait (an
	// empty delimiter frame, then the request), never read.
	hello := append(greeting("NULL"), command("READY", readyBody("DEALER"))...)
	msg := append([]byte{0x01, 0x00, 0x00, byte(len(req))}, req...)
	script := `
import socket, sys
path, n, hello, msg = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3]), bytes.fromhex(sys.argv[4])
socks = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(hello[:64])
    got = b""
    while len(got) < 64:
        b = s.recv(64 - len(got))
        if not b:
            break
        got += b
    s.sendall(hello[64:] + msg)
    socks.append(s)
print("sent", flush=True)
sys.stdin.read()
`
	const tries = 1030
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nobody[0], append(nobody[1:], py, "-c", script,
		strings.TrimPrefix(cfg.Control, "ipc://"), strconv.Itoa(tries), hex.EncodeToString(hello), hex.EncodeToString(msg))...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "sent\n" {
		t.Fatalf("the busy client: %q %v", line, err)
	}
	// Every slot but ts.client's holds a wait (the rest were refused).
	eventually(t, 30*time.Second, "every connection slot holding a wait", func() bool {
		return ts.Server.heldWaits() == cfg.MaxConns-1
	})
	operator := client.New(client.Options{ControlAddress: cfg.Control, EventAddress: cfg.Event, RequestTimeout: 5 * time.Second, MaxReconnectAttempts: 1})
	defer operator.Close()
	if _, err := operator.Health(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("our own user's health with every slot busy: %v", err)
	}
	// Every connection past the slots was turned away and counted: at
	// the cap, or (when the server was slow to finish handshakes and more
	// than the handshake bound waited at once) displaced in its handshake.
	eventually(t, 10*time.Second, "the busy client's extra connections counted", func() bool {
		m := scrape2(t, ts)
		refused := value(m, "exec_supervisor_connections_rejected_total", "reason", "too-many-connections")
		displaced := value(m, "exec_supervisor_connections_rejected_total", "reason", "handshake-displaced")
		return refused+displaced >= float64(tries-(cfg.MaxConns-1))
	})
}
