// Package proctest inspects the process table for tests: children of a
// process, live members of a process group or session. It reads /proc
// only; it never signals anything. Zombies are not counted as live.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"sync"

	"github.com/exec-supervisor/exec-supervisor/internal/leakcheck"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
)

func scan() []proc.Process {
	var out []proc.Process
	proc.Each(func(p proc.Process) bool {
		out = append(out, p)
		return true
	})
	return out
}

// Alive reports whether pid is a live (not zombie) process.
func Alive(pid int) bool {
	p, ok := proc.Lookup(pid)
	return ok && !p.Zombie
}

// ZombieChildren lists the unreaped exited children of pid.
func ZombieChildren(pid int) []int {
	var out []int
	for _, s := range scan() {
		if s.PPid == pid && s.Zombie {
			out = append(out, s.Pid)
		}
	}
	return out
}

// Children lists the live children of pid.
func Children(pid int) []int {
	var out []int
	for _, s := range scan() {
		if s.PPid == pid && !s.Zombie {
			out = append(out, s.Pid)
		}
	}
	return out
}

// InGroup lists the live processes of process group pgid, wherever they
// were reparented.
func InGroup(pgid int) []int {
	var out []int
	for _, s := range scan() {
		if s.Pgid == pgid && !s.Zombie {
			out = append(out, s.Pid)
		}
	}
	return out
}

// GroupsOfSession lists the process groups of live processes in session sid.
func GroupsOfSession(sid int) []int {
	seen := map[int]bool{}
	var out []int
	for _, s := range scan() {
		if s.Sid == sid && !s.Zombie && !seen[s.Pgid] {
			seen[s.Pgid] = true
			out = append(out, s.Pgid)
		}
	}
	return out
}

// RunWithoutLeaks runs the tests in an isolated environment (testenv)
// and fails the run when they left a live child process or a goroutine of
// this module behind (leakcheck). Use it as TestMain's body:
// os.Exit(RunWithoutLeaks(m)).
func RunWithoutLeaks(m interface{ Run() int }) int {
	cleanup, err := testenv.Isolate()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	code := m.Run()
	if code == 0 {
		if kids := Children(os.Getpid()); len(kids) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: test left child processes behind: %v\n", kids)
			code = 1
		}
	}
	if code == 0 {
		code = leakcheck.Report()
	}
	return code
}

// Buffer is a bytes.Buffer safe for concurrent writers (a child's output
// and a test reading it).
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (w *Buffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String returns everything written so far.
func (w *Buffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
