package zmtp

import (
	"context"
	"net"
	"syscall"
	"testing"
)

// TestListenersReuseAddr: tcp listeners set SO_REUSEADDR (Go's net.Listen
// does on Linux), so that a supervisor restarted on the same ports binds
// them while the connections its predecessor closed linger in TIME_WAIT.
func TestListenersReuseAddr(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := ListenRouter(ctx, "tcp://127.0.0.1:0", &Policy{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sc, err := r.l.inner.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := sc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if v != 1 {
		t.Fatalf("SO_REUSEADDR = %d on a tcp listener", v)
	}
}
