// Package proctest inspects the process table for tests: children of a
// process, live members of a process group or session. It reads /proc
// only; it never signals anything. Zombies are not counted as live.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// stat is what the tests need of /proc/<pid>/stat.
type stat struct {
	pid, ppid, pgid, sid int
	zombie               bool
}

func scan() []stat {
	ents, _ := os.ReadDir("/proc")
	out := make([]stat, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 4 {
			continue
		}
		st := stat{pid: pid, zombie: f[0] == "Z" || f[0] == "X"}
		st.ppid, _ = strconv.Atoi(f[1])
		st.pgid, _ = strconv.Atoi(f[2])
		st.sid, _ = strconv.Atoi(f[3])
		out = append(out, st)
	}
	return out
}

// Children lists the live children of pid.
func Children(pid int) []int {
	var out []int
	for _, s := range scan() {
		if s.ppid == pid && !s.zombie {
			out = append(out, s.pid)
		}
	}
	return out
}

// InGroup lists the live processes of process group pgid, wherever they
// were reparented.
func InGroup(pgid int) []int {
	var out []int
	for _, s := range scan() {
		if s.pgid == pgid && !s.zombie {
			out = append(out, s.pid)
		}
	}
	return out
}

// GroupsOfSession lists the process groups of live processes in session sid.
func GroupsOfSession(sid int) []int {
	seen := map[int]bool{}
	var out []int
	for _, s := range scan() {
		if s.sid == sid && !s.zombie && !seen[s.pgid] {
			seen[s.pgid] = true
			out = append(out, s.pgid)
		}
	}
	return out
}

// RunWithoutLeaks runs the tests and fails the run when one left a live
// child process behind. Use it as TestMain's body: os.Exit(RunWithoutLeaks(m)).
func RunWithoutLeaks(m interface{ Run() int }) int {
	code := m.Run()
	if code == 0 {
		if kids := Children(os.Getpid()); len(kids) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: test left child processes behind: %v\n", kids)
			code = 1
		}
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
