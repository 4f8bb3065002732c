package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// onTerminal runs execctl with its standard input and output on a new
// terminal and returns its exit code and what the terminal showed.
// (input, if not nil, is called with the terminal's other end and what
// it showed so far, until execctl ends.)
func onTerminal(t *testing.T, args []string, input func(term io.Writer, shown func() string)) (int, string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	var mu sync.Mutex
	var shown bytes.Buffer
	read := make(chan struct{})
	go func() { // (until the terminal closes: EIO)
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			shown.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() { done <- runIO(ctx, args, tty, tty, &errb) }()
	if input != nil {
		input(ptmx, func() string { mu.Lock(); defer mu.Unlock(); return shown.String() })
	}
	var code int
	select {
	case code = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("execctl %q did not end", args)
	}
	tty.Close()
	<-read
	if errb.Len() > 0 {
		t.Logf("stderr: %s", errb.String())
	}
	return code, shown.String()
}

// TestNoColor: logs colours the job ids on a terminal, unless NO_COLOR
// is set (to anything: no-color.org); never when not on a terminal.
func TestNoColor(t *testing.T) {
	s := startSupervisor(t)
	id := s.spawnID(t, "--", "echo", "hi")
	s.waitExited(t, id)
	args := append(s.globals(), "logs", id)
	if code, shown := onTerminal(t, args, nil); code != 0 || !strings.Contains(shown, "\x1b[31m"+id+"\x1b[0m | hi") {
		t.Fatalf("logs on a terminal: exit %d, %q", code, shown)
	}
	t.Setenv("NO_COLOR", "1")
	if code, shown := onTerminal(t, args, nil); code != 0 || strings.Contains(shown, "\x1b") || !strings.Contains(shown, id+" | hi") {
		t.Fatalf("logs on a terminal with NO_COLOR: exit %d, %q", code, shown)
	}
	t.Setenv("NO_COLOR", "")
	if out := s.mustCtl(t, "logs", id); out != id+" | hi\n" {
		t.Fatalf("logs to a buffer: %q", out)
	}
}
