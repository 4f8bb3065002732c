package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// freePorts returns n tcp ports on 127.0.0.1 that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// TestRestartOnSameTCPPortsAtOnce: a supervisor stopped with connected
// clients, a subscriber and a running job has released its tcp ports
// when its process has exited (its jobs never hold them: no inherited
// descriptors), and the next one binds them at once, without any delay
// (SO_REUSEADDR: the connections the stop closed linger in TIME_WAIT),
// as OpenClaw's tests restart theirs. Its OpenClaw client (our uid, on
// loopback) needs no token.
func TestRestartOnSameTCPPortsAtOnce(t *testing.T) {
	e := newEnv(t)
	ports := freePorts(t, 2)
	e.ctl, e.evt = fmt.Sprintf("tcp://127.0.0.1:%d", ports[0]), fmt.Sprintf("tcp://127.0.0.1:%d", ports[1])
	for round := range 3 {
		s := e.start(t)
		ctx := ctxFor(t, 20*time.Second)
		sub, err := zmtp.DialClient(ctx, "SUB", e.evt, 5*time.Second, "")
		if err != nil {
			t.Fatalf("round %d: subscriber: %v", round, err)
		}
		defer sub.Close()
		j, err := s.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		if socks := socketFDs(t, j.Pid); len(socks) > 0 {
			t.Fatalf("round %d: the job holds sockets %v", round, socks)
		}
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			t.Fatal("supervisor did not exit within 15 s of SIGTERM")
		}
		if s.exitErr != nil {
			t.Fatalf("round %d: exit: %v\n%s", round, s.exitErr, s.log)
		}
		if round == 0 {
			// Free the moment the process is gone: anyone may bind them.
			for _, p := range ports {
				l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
				if err != nil {
					t.Fatalf("port %d still taken after the supervisor exited: %v", p, err)
				}
				l.Close()
			}
		}
		// (the next round starts at once: e.start fails if it cannot bind)
	}
}

// socketFDs lists the sockets among the descriptors of process pid.
func socketFDs(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var socks []string
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			socks = append(socks, e.Name()+"->"+l)
		}
	}
	return socks
}
