package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// onTerminal runs execctl with its standard input and output on a new
// terminal and returns its exit code and what the terminal showed.
// (input, if not nil, is called with the terminal's other end and a
// function that waits, up to a deadline, until the terminal showed all
// of what it is given.)
func onTerminal(t *testing.T, args []string, input func(term io.Writer, waitFor func(...string))) (int, string) {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	defer ptmx.Close()
	var mu sync.Mutex
	var shown bytes.Buffer
	read, more := make(chan struct{}), make(chan struct{}, 1)
	go func() { // (until the terminal closes: EIO)
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			mu.Lock()
			shown.Write(buf[:n])
			mu.Unlock()
			select {
			case more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() { done <- runIO(ctx, args, tty, tty, &errb) }()
	if input != nil {
		deadline := time.After(10 * time.Second)
		input(ptmx, func(want ...string) {
			t.Helper()
			for {
				mu.Lock()
				sc := shown.String()
				mu.Unlock()
				missing := slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(sc, w) })
				if !missing {
					return
				}
				select {
				case <-more:
				case <-deadline:
					t.Fatalf("the terminal never showed %q:\n%s", want, sc)
				}
			}
		})
	}
	var code int
	select {
	case code = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("execctl %q did not end", args)
	}
	// (execctl leaves the terminal as it found it)
	if after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil || *after != *before {
		t.Errorf("the terminal's settings changed: %+v, were %+v (%v)", after, before, err)
	}
	if fl, err := unix.FcntlInt(tty.Fd(), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("the terminal was left non-blocking (%v)", err)
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

// TestTopQuitsOnQ: top on a terminal quits when q is typed, and gives
// the terminal back as it was (it reads keys in cbreak mode meanwhile).
func TestTopQuitsOnQ(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--", "sleep", "30")
	defer s.ctl(t, "kill", "--signal", "KILL", id)
	code, shown := onTerminal(t, append(s.globals(), "top", "--interval", "100ms"), func(term io.Writer, waitFor func(...string)) {
		waitFor("q quits", id)
		if _, err := term.Write([]byte("q")); err != nil {
			t.Fatal(err)
		}
	})
	if code != 0 {
		t.Fatalf("top: exit %d\n%s", code, shown)
	}
}
