// Package cgroups gives each job a cgroup v2 of its own when the machine
// has a writable cgroup v2 hierarchy, so that every process a job starts,
// including ones that leave its process group or session (setsid, double
// fork, daemonizing tools), stays attributable and can be killed.
//
// It detects the hierarchy (/sys/fs/cgroup, or a cgroup2 mount elsewhere
// such as /sys/fs/cgroup/unified) from /proc/self/mountinfo and uses the
// supervisor's own cgroup, or a configured one, as the parent. Without a
// usable hierarchy, Detect says why and the caller falls back to process
// groups. It does not set resource limits.
package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Base is the directory under which job cgroups are created.
type Base struct {
	Dir string
}

// Detect finds a writable cgroup v2 directory for job cgroups: parent if
// given (a path inside the cgroup2 mount, or relative to it), else the
// supervisor's own cgroup, with a child named name created in it (one per
// state directory, so two supervisors never share one).
func Detect(parent, name string) (*Base, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	dir := parent
	if dir == "" {
		own, err := ownCgroup()
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(mnt, own)
	} else if !strings.HasPrefix(dir, mnt) {
		dir = filepath.Join(mnt, dir)
	}
	base := filepath.Join(dir, name)
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup v2 at %s is not writable: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("%s is not a cgroup v2 directory: %w", base, err)
	}
	return &Base{Dir: base}, nil
}

// cgroup2Mount returns the mount point of the cgroup v2 hierarchy.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find cgroup v2: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mountpoint(5th) ... " - " fstype source options
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		rf := strings.Fields(right)
		lf := strings.Fields(left)
		if len(rf) > 0 && rf[0] == "cgroup2" && len(lf) >= 5 {
			return lf[4], nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted")
}

// ownCgroup returns the supervisor's cgroup v2 path ("0::/path").
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("the supervisor is in no cgroup v2")
}

// Cgroup is one job's cgroup.
type Cgroup struct {
	Path string
}

// Create makes the cgroup of job id and returns it with an open directory
// descriptor for SysProcAttr.CgroupFD (the caller closes it after start).
func (b *Base) Create(id string) (*Cgroup, *os.File, error) {
	p := filepath.Join(b.Dir, id)
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create cgroup %s: %w", p, err)
	}
	fd, err := os.Open(p)
	if err != nil {
		os.Remove(p)
		return nil, nil, fmt.Errorf("open cgroup %s: %w", p, err)
	}
	return &Cgroup{Path: p}, fd, nil
}

// Open returns the cgroup at path (for recovery); nil if it does not exist.
func Open(path string) *Cgroup {
	if _, err := os.Stat(filepath.Join(path, "cgroup.procs")); err != nil {
		return nil
	}
	return &Cgroup{Path: path}
}

// Procs lists the processes in the cgroup.
func (c *Cgroup) Procs() []int {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// Populated reports whether any process is in the cgroup.
func (c *Cgroup) Populated() bool {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.events"))
	if err != nil {
		return len(c.Procs()) > 0
	}
	return strings.Contains(string(b), "populated 1")
}

// Signal sends sig to every process in the cgroup.
func (c *Cgroup) Signal(sig syscall.Signal) {
	for _, pid := range c.Procs() {
		_ = syscall.Kill(pid, sig)
	}
}

// Kill kills every process in the cgroup: cgroup.kill where the kernel has
// it, else freeze, SIGKILL each process, thaw.
func (c *Cgroup) Kill() error {
	if err := os.WriteFile(filepath.Join(c.Path, "cgroup.kill"), []byte("1"), 0); err == nil {
		return nil
	}
	_ = os.WriteFile(filepath.Join(c.Path, "cgroup.freeze"), []byte("1"), 0)
	c.Signal(syscall.SIGKILL)
	return os.WriteFile(filepath.Join(c.Path, "cgroup.freeze"), []byte("0"), 0)
}

// Remove waits (up to d) for the cgroup to empty, then removes it.
func (c *Cgroup) Remove(d time.Duration) error {
	deadline := time.Now().Add(d)
	for c.Populated() {
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes %v", c.Path, c.Procs())
		}
		time.Sleep(5 * time.Millisecond) // no cheaper notification than polling cgroup.events here
	}
	if err := os.Remove(c.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", c.Path, err)
	}
	return nil
}

// Leftovers lists job cgroups under b (for reconciliation at start).
func (b *Base) Leftovers() []*Cgroup {
	ents, err := os.ReadDir(b.Dir)
	if err != nil {
		return nil
	}
	var out []*Cgroup
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "j-") {
			if c := Open(filepath.Join(b.Dir, e.Name())); c != nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// Close removes the base directory if no job cgroup is left in it.
func (b *Base) Close() error {
	if err := os.Remove(b.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", b.Dir, err)
	}
	return nil
}
