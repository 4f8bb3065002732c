// Package proc holds what the supervisor knows of processes from the
// kernel: the process table (/proc/<pid>/stat), start-time fingerprints
// and the boot id that tell a process from a later one with its pid,
// process groups and sessions (alive, signalled), the members of groups,
// and the mark every job carries in its environment (found, ended). It
// starts nothing and owns nothing: the job engine (internal/jobs) and the
// server's recovery decide what to signal.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// GroupAlive reports whether any live process is in process group pgid.
// Zombies do not count: they run nothing and hold no files, and an orphaned
// zombie waits for init (which may reap lazily), not for us.
func GroupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	err := syscall.Kill(-pgid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// Some member exists: is any of them not a zombie?
	found := false
	EachEntry(func(p *Entry) bool {
		found = p.Pgid == pgid && !p.Zombie()
		return !found
	})
	return found
}

// SignalGroup sends sig to every process of group pgid. A group that is
// already gone is not an error.
func SignalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("refusing to signal process group %d", pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", pgid, err)
	}
	return nil
}

// StartTicks returns field 22 of /proc/<pid>/stat: the process start
// time in clock ticks after boot. Together with the boot id it identifies a
// process across pid reuse.
func StartTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	return parseStartTicks(b, pid)
}

// Group returns the process group and session of pid.
func Group(pid int) (pgid, sid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	f, ok := StatFields(b)
	if !ok || len(f) < 4 {
		return 0, 0, fmt.Errorf("parse stat of pid %d: malformed", pid)
	}
	if pgid, err = strconv.Atoi(f[2]); err == nil {
		sid, err = strconv.Atoi(f[3])
	}
	return pgid, sid, err
}

func parseStartTicks(b []byte, pid int) (uint64, error) {
	f, ok := StatFields(b)
	// f[0] is field 3 (state), so field 22 is f[19].
	if !ok || len(f) < 20 {
		return 0, fmt.Errorf("parse stat of pid %d: malformed", pid)
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse start time of pid %d: %w", pid, err)
	}
	return v, nil
}

// StatFields splits a /proc/<pid>/stat line after the command name (which
// may contain spaces and parentheses): f[0] is field 3 (state), f[1] the
// ppid, f[2] the pgrp, f[3] the session. false when it is malformed.
func StatFields(b []byte) ([]string, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(b[i+1:]))
	return f, len(f) >= 4
}

// BootID returns the kernel's boot id, or "" when unavailable.
func BootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// sessionMembers returns the process groups of live processes in session
// sid (a PTY job's shell may put its own jobs in groups of their own).
func SessionGroups(sid int) []int {
	seen := map[int]bool{}
	var out []int
	EachEntry(func(p *Entry) bool {
		if p.Sid == sid && !p.Zombie() && !seen[p.Pgid] {
			seen[p.Pgid] = true
			out = append(out, p.Pgid)
		}
		return true
	})
	return out
}

// SessionAlive reports whether session sid has a live process.
func SessionAlive(sid int) bool { return sid > 1 && len(SessionGroups(sid)) > 0 }

// SignalSession sends sig to every process group of session sid.
func SignalSession(sid int, sig syscall.Signal) error {
	if sid <= 1 {
		return fmt.Errorf("refusing to signal session %d", sid)
	}
	var first error
	for _, pg := range SessionGroups(sid) {
		if err := SignalGroup(pg, sig); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Process is one entry of the process table, for callers outside the
// package (test helpers).
type Process struct {
	Pid, PPid, Pgid, Sid int
	// Zombie: exited, not yet reaped.
	Zombie bool
}

// Each calls fn for every process in /proc (one scan); fn returns
// false to stop early.
func Each(fn func(Process) bool) {
	EachEntry(func(p *Entry) bool {
		return fn(Process{Pid: p.Pid, PPid: p.PPid, Pgid: p.Pgid, Sid: p.Sid, Zombie: p.Zombie()})
	})
}

// Lookup reads one process's entry; false when there is none.
func Lookup(pid int) (Process, bool) {
	p, _, ok := readProcess(pid)
	return p, ok
}

// LookupTicks is Lookup with the process's start ticks (see
// StartTicks), from one read; false when either is missing.
func LookupTicks(pid int) (Process, uint64, bool) {
	p, f, ok := readProcess(pid)
	if !ok || len(f) < 20 {
		return Process{}, 0, false
	}
	ticks, err := strconv.ParseUint(f[19], 10, 64)
	return p, ticks, err == nil
}

// readProcess reads one process's entry and its stat fields (StatFields).
func readProcess(pid int) (Process, []string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Process{}, nil, false
	}
	f, ok := StatFields(b)
	if !ok {
		return Process{}, nil, false
	}
	p := Process{Pid: pid, Zombie: f[0] == "Z" || f[0] == "X"}
	p.PPid, _ = strconv.Atoi(f[1])
	p.Pgid, _ = strconv.Atoi(f[2])
	p.Sid, _ = strconv.Atoi(f[3])
	return p, f, true
}

// Entry is one process as /proc/<pid>/stat describes it. f holds the
// fields after the command name: f[0] is field 3 (state).
type Entry struct {
	Pid             int
	State           string
	PPid, Pgid, Sid int
	F               []string
}

// Zombie: exited, not yet reaped.
func (p *Entry) Zombie() bool { return p.State == "Z" || p.State == "X" }

// EachEntry calls fn for every process in /proc (one scan); fn returns
// false to stop early.
func EachEntry(fn func(p *Entry) bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	buf := make([]byte, StatBufSize)
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := ReadStat(n, buf)
		if err != nil {
			continue
		}
		f, ok := StatFields(b)
		if !ok {
			continue
		}
		p := Entry{State: f[0], F: f}
		p.Pid, _ = strconv.Atoi(n)
		p.PPid, _ = strconv.Atoi(f[1])
		p.Pgid, _ = strconv.Atoi(f[2])
		p.Sid, _ = strconv.Atoi(f[3])
		if !fn(&p) {
			return
		}
	}
}

// StatBufSize holds any /proc/<pid>/stat line (a few hundred bytes; 52
// numbers and a command name of at most 64 bytes at the very most).
const StatBufSize = 2048

// ReadStat reads /proc/<pid>/stat into buf (StatBufSize): three system
// calls where os.ReadFile makes five or six, 7 us instead of 11 here;
// scans of the process table read one per process. The kernel makes the
// line whole in one read.
func ReadStat(pid string, buf []byte) ([]byte, error) {
	path := "/proc/" + pid + "/stat"
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Read(fd, buf[:cap(buf)])
		switch {
		case err == unix.EINTR:
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		case n == cap(buf):
			return nil, fmt.Errorf("read %s: longer than %d bytes", path, n)
		default:
			return buf[:n], nil
		}
	}
}

// ScopeKey returns the job scope p belongs to among the given sessions (PTY
// jobs, keyed by session id) and process groups, or false.
func (p *Entry) ScopeKey(groups, sessions map[int]bool) (int, bool) {
	switch {
	case sessions[p.Sid]:
		return p.Sid, true
	case groups[p.Pgid]:
		return p.Pgid, true
	}
	return 0, false
}
