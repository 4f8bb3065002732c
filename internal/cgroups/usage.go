package cgroups

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Usage is what the processes of a job's cgroup, and of the cgroups the
// job made below it, use: read from the cgroup's own files, at a cost
// that follows the job's size, not the machine's.
type Usage struct {
	// Pids are the cgroup's live processes (cgroup.procs lists no
	// zombies), those of the cgroups below it included.
	Pids []int
	// CPU is the user+system time of every process that ran in the
	// cgroup since it was handed to its current job, ended ones
	// included (cpu.stat usage_usec, present without the cpu
	// controller).
	CPU time.Duration
	// Memory is the anonymous and mapped file memory charged to the
	// cgroup (memory.stat anon + file_mapped: its resident set, each
	// page counted once); HasMemory is false when the memory
	// controller is not enabled for it.
	Memory    int64
	HasMemory bool
}

// Usage reads the cgroup's usage (see Usage). A cgroup taken from the
// pool counts CPU from when it was handed out, not what its earlier jobs
// used. Its files are opened at the cgroup's open directory where it has
// one (a third of the cost of os.ReadFile by path, measured).
func (c *Cgroup) Usage() (Usage, error) {
	c.emu.Lock()
	defer c.emu.Unlock()
	at, prefix := unix.AT_FDCWD, c.Path+"/"
	if c.dir != nil {
		at, prefix = c.dirFd, ""
	}
	buf := make([]byte, 0, 4096)
	var u Usage
	used, err := cpuUsec(at, prefix, buf)
	if err != nil {
		return u, err
	}
	u.CPU = time.Duration(max(0, used-c.cpuBase.Load())) * time.Microsecond
	b, err := readAt(at, prefix+"cgroup.procs", buf)
	if err != nil {
		return u, fmt.Errorf("cgroup processes: %w", err)
	}
	u.Pids = parsePids(b, nil)
	// A cgroup directory's link count is 2 plus its subdirectories: only
	// a job that made cgroups of its own costs a directory read.
	var st unix.Stat_t
	if unix.Fstatat(at, prefix+".", &st, 0) == nil && st.Nlink > 2 {
		u.Pids = procsBelow(c.Path, u.Pids)
	}
	if b, err := readAt(at, prefix+"memory.stat", buf); err == nil {
		anon, ok1 := statValue(b, "anon")
		mapped, ok2 := statValue(b, "file_mapped")
		u.Memory, u.HasMemory = anon+mapped, ok1 && ok2
	}
	return u, nil
}

// markCPUBase records the CPU time the cgroup has used so far, for the
// next job it is handed to (see Usage).
func (c *Cgroup) markCPUBase() error {
	used, err := cpuUsec(unix.AT_FDCWD, c.Path+"/", nil)
	if err != nil {
		return err
	}
	c.cpuBase.Store(used)
	return nil
}

// cpuUsec returns usage_usec of the cgroup whose files are at (at,
// prefix).
func cpuUsec(at int, prefix string, buf []byte) (int64, error) {
	b, err := readAt(at, prefix+"cpu.stat", buf)
	if err != nil {
		return 0, fmt.Errorf("cgroup cpu usage: %w", err)
	}
	v, ok := statValue(b, "usage_usec")
	if !ok {
		return 0, fmt.Errorf("cgroup cpu usage: no usage_usec in %scpu.stat", prefix)
	}
	return v, nil
}

// readAt reads the file name (relative to the directory descriptor at, or
// absolute) into buf, grown as needed: three system calls where
// os.ReadFile makes five or six.
func readAt(at int, name string, buf []byte) ([]byte, error) {
	fd, err := unix.Openat(at, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(512, cap(buf)))
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == unix.EINTR:
		case err != nil:
			return nil, &os.PathError{Op: "read", Path: name, Err: err}
		case n == 0:
			return buf, nil
		default:
			buf = buf[:len(buf)+n]
		}
	}
}

// statValue returns the value of key in a flat-keyed cgroup file
// ("key value" lines, as cpu.stat and memory.stat).
func statValue(b []byte, key string) (int64, bool) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte{' '})
		if ok && string(k) == key {
			n, err := strconv.ParseInt(string(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// procsBelow appends to out the processes in the cgroups below the one
// at dir (a cgroup removed meanwhile took its processes with it).
func procsBelow(dir string, out []int) []int {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			sub := filepath.Join(dir, e.Name())
			if b, err := os.ReadFile(filepath.Join(sub, "cgroup.procs")); err == nil {
				out = parsePids(b, out)
			}
			out = procsBelow(sub, out)
		}
	}
	return out
}

// parsePids appends the pids of a cgroup.procs file's content to out.
func parsePids(b []byte, out []int) []int {
	for _, f := range bytes.Fields(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			out = append(out, pid)
		}
	}
	return out
}
