package server

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSystemdNotify: under Type=notify the supervisor says READY=1 once
// its sockets answer (health works by then), pets the watchdog while its
// control socket answers, and says STOPPING=1 as it shuts down.
func TestSystemdNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	read := func(what string) string {
		t.Helper()
		buf := make([]byte, 4096)
		_ = l.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := l.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return string(buf[:n])
	}
	cfg := testConfig(t)
	cfg.NotifySocket, cfg.WatchdogInterval = path, 400*time.Millisecond
	ts := startServer(t, cfg)
	if got := read("READY=1"); !strings.HasPrefix(got, "READY=1\n") || !strings.Contains(got, "MAINPID=") {
		t.Fatalf("first notification %q; want READY=1", got)
	}
	if _, err := ts.client.Health(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("health after READY=1: %v", err)
	}
	for i := range 2 {
		if got := read("WATCHDOG=1"); got != "WATCHDOG=1" {
			t.Fatalf("notification %d: %q; want WATCHDOG=1", i, got)
		}
	}
	closed := make(chan struct{})
	go func() { defer close(closed); ts.Close(ctxT(t, 20*time.Second)) }()
	defer func() { <-closed }()
	for {
		got := read("STOPPING=1")
		if strings.HasPrefix(got, "STOPPING=1") {
			break
		}
		if got != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping", got)
		}
	}
}
