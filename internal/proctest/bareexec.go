package proctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"
)

// bareExecEnv names the socket a re-executed test binary serves bare
// exec requests on (see MaybeServeBareExec).
const bareExecEnv = "PROCTEST_BARE_EXEC"

// MaybeServeBareExec makes a test binary re-executed by StartBareExec a
// bare exec server, and never returns in that case. Call it first in
// TestMain.
//
// The bare exec server is the floor for any out-of-process supervisor: a
// Go process that, for each one-byte request on a unix socket, runs
// /bin/true with os/exec and answers one byte when it exited. No
// protocol, no bookkeeping, no output: what remains is one round trip
// between two processes per job.
func MaybeServeBareExec() {
	path := os.Getenv(bareExecEnv)
	if path == "" {
		return
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bare exec server:", err)
		os.Exit(1)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(0)
		}
		go func() {
			defer c.Close()
			var b [1]byte
			for {
				if _, err := c.Read(b[:]); err != nil {
					return
				}
				b[0] = 0
				if exec.Command("/bin/true").Run() != nil {
					b[0] = 1
				}
				if _, err := c.Write(b[:]); err != nil {
					return
				}
			}
		}()
	}
}

// StartBareExec starts the bare exec server (this test binary again, see
// MaybeServeBareExec) on a socket in dir and returns a runner that has it
// run one /bin/true (safe for par goroutines at once, each with a
// connection of its own), a function that stops it, and its pid.
func StartBareExec(dir string, par int) (run func() error, stop func(), pid int, err error) {
	path := dir + "/bare.sock"
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), bareExecEnv+"="+path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, 0, err
	}
	kill := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	conns := make(chan net.Conn, par)
	deadline := time.Now().Add(10 * time.Second)
	for len(conns) < par {
		c, err := net.Dial("unix", path)
		if err != nil {
			if time.Now().After(deadline) {
				kill()
				return nil, nil, 0, fmt.Errorf("bare exec server: %w", err)
			}
			time.Sleep(10 * time.Millisecond) // the process is starting; nothing to wait on
			continue
		}
		conns <- c
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for len(conns) > 0 {
				(<-conns).Close()
			}
			kill()
		})
	}
	run = func() error {
		c := <-conns
		defer func() { conns <- c }()
		var b [1]byte
		if _, err := c.Write(b[:]); err != nil {
			return err
		}
		if _, err := c.Read(b[:]); err != nil {
			return err
		}
		if b[0] != 0 {
			return fmt.Errorf("bare exec server: /bin/true failed")
		}
		return nil
	}
	return run, stop, cmd.Process.Pid, nil
}
