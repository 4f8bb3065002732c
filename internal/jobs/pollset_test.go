package jobs

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPollSet: a pollSet's wait returns when one of its descriptors is
// ready (a pipe with input, a pipe whose writer is gone, a process that
// exited), with poll's Revents; input left unread keeps it ready; a
// descriptor closed and set to -1 is no longer waited for.
func TestPollSet(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if p[1] >= 0 {
			unix.Close(p[1])
		}
	}()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		t.Skipf("no pidfds here: %v", err)
	}
	defer unix.Close(pidfd)
	fds := []unix.PollFd{{Fd: int32(p[0]), Events: unix.POLLIN}, {Fd: int32(pidfd), Events: unix.POLLIN}}
	s, err := newPollSet(fds)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	wait := func() <-chan error {
		done := make(chan error, 1)
		go func() { done <- s.wait(fds) }()
		return done
	}
	got := func(done <-chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: wait did not return in 10 s", what)
		}
	}
	notYet := func(done <-chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("wait returned (%v) before %s", err, what)
		default:
		}
	}

	done := wait()
	notYet(done, "any input")
	unix.Write(p[1], []byte("x"))
	got(done, "input")
	if fds[0].Revents&unix.POLLIN == 0 || fds[1].Revents != 0 {
		t.Fatalf("revents %#x %#x, want POLLIN on the pipe only", fds[0].Revents, fds[1].Revents)
	}
	got(wait(), "input left unread")

	var b [8]byte
	unix.Read(p[0], b[:])
	done = wait()
	notYet(done, "the process exited")
	cmd.Process.Signal(os.Kill)
	got(done, "exit")
	if fds[1].Revents&unix.POLLIN == 0 || fds[0].Revents != 0 {
		t.Fatalf("revents %#x %#x, want POLLIN on the pidfd only", fds[0].Revents, fds[1].Revents)
	}

	// The pipe's end, alone: the exit is still ready, so ask for it no more.
	fds[1].Fd = -1
	unix.Close(p[1])
	p[1] = -1
	got(wait(), "the pipe's writer gone")
	if fds[0].Revents&unix.POLLHUP == 0 {
		t.Fatalf("revents %#x, want POLLHUP", fds[0].Revents)
	}
	unix.Close(p[0])
	fds[0].Fd = -1
}
