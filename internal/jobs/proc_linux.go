package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// groupAlive reports whether any live process is in process group pgid.
// Zombies do not count: they run nothing and hold no files, and an orphaned
// zombie waits for init (which may reap lazily), not for us.
func groupAlive(pgid int) bool {
	if pgid <= 1 {
		return false
	}
	err := syscall.Kill(-pgid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// Some member exists: is any of them not a zombie?
	found := false
	eachProc(func(p *procEntry) bool {
		found = p.pgid == pgid && !p.zombie()
		return !found
	})
	return found
}

// signalGroup sends sig to every process of group pgid. A group that is
// already gone is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 1 {
		return fmt.Errorf("refusing to signal process group %d", pgid)
	}
	if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", pgid, err)
	}
	return nil
}

// ProcStartTicks returns field 22 of /proc/<pid>/stat: the process start
// time in clock ticks after boot. Together with the boot id it identifies a
// process across pid reuse.
func ProcStartTicks(pid int) (uint64, error) {
	// Read on every spawn: one open, one read into a stack buffer, one
	// close (the line is well under 1 KiB).
	var path [32]byte
	p := strconv.AppendInt(append(path[:0], "/proc/"...), int64(pid), 10)
	p = append(p, "/stat"...)
	fd, err := syscall.Open(string(p), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("read stat of pid %d: %w", pid, err)
	}
	var buf [1024]byte
	n, err := syscall.Read(fd, buf[:])
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("read stat of pid %d: %v", pid, err)
	}
	return parseStartTicks(buf[:n], pid)
}

func parseStartTicks(b []byte, pid int) (uint64, error) {
	// comm (field 2) may contain spaces and parentheses: split after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse stat of pid %d: no comm field", pid)
	}
	// After ')' come fields 3, 4, ...: field 22 is the 20th.
	rest := b[i+1:]
	for field := 3; ; field++ {
		rest = bytes.TrimLeft(rest, " ")
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		if len(rest) == 0 {
			return 0, fmt.Errorf("parse stat of pid %d: %d fields", pid, field-1)
		}
		if field == 22 {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(rest[:end])), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse start time of pid %d: %w", pid, err)
			}
			return v, nil
		}
		rest = rest[end:]
	}
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
func sessionGroups(sid int) []int {
	seen := map[int]bool{}
	var out []int
	eachProc(func(p *procEntry) bool {
		if p.sid == sid && !p.zombie() && !seen[p.pgid] {
			seen[p.pgid] = true
			out = append(out, p.pgid)
		}
		return true
	})
	return out
}

// sessionAlive reports whether session sid has a live process.
func sessionAlive(sid int) bool { return sid > 1 && len(sessionGroups(sid)) > 0 }

// signalSession sends sig to every process group of session sid.
func signalSession(sid int, sig syscall.Signal) error {
	if sid <= 1 {
		return fmt.Errorf("refusing to signal session %d", sid)
	}
	var first error
	for _, pg := range sessionGroups(sid) {
		if err := signalGroup(pg, sig); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// procStat reads fields 3 (state), 5 (pgrp) and 6 (session) of
// /proc/<pid>/stat.
func procStat(pid string) (state string, pgid, sid int, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return "", 0, 0, false
	}
	pgid, _ = strconv.Atoi(f[2])
	sid, _ = strconv.Atoi(f[3])
	return f[0], pgid, sid, true
}

// procEntry is one process as /proc/<pid>/stat describes it. f holds the
// fields after the command name: f[0] is field 3 (state).
type procEntry struct {
	pid             int
	state           string
	ppid, pgid, sid int
	f               []string
}

func (p *procEntry) zombie() bool { return p.state == "Z" || p.state == "X" }

// eachProc calls fn for every process in /proc (one scan); fn returns
// false to stop early.
func eachProc(fn func(p *procEntry) bool) {
	d, err := os.Open("/proc")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
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
		p := procEntry{state: f[0], f: f}
		p.pid, _ = strconv.Atoi(n)
		p.ppid, _ = strconv.Atoi(f[1])
		p.pgid, _ = strconv.Atoi(f[2])
		p.sid, _ = strconv.Atoi(f[3])
		if !fn(&p) {
			return
		}
	}
}

// scopeKey returns the job scope p belongs to among the given sessions (PTY
// jobs, keyed by session id) and process groups, or false.
func (p *procEntry) scopeKey(groups, sessions map[int]bool) (int, bool) {
	switch {
	case sessions[p.sid]:
		return p.sid, true
	case groups[p.pgid]:
		return p.pgid, true
	}
	return 0, false
}
