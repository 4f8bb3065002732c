package local

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
)

// cgroupPrefix starts the name of an Engine's cgroup base:
// "exec-supervisor-local-<pid namespace>-<pid>-<start ticks>-<n>", n
// random (each Engine of a process has a base of its own). (Supervisors
// never touch these: theirs are named by state directory.)
const cgroupPrefix = "exec-supervisor-local-"

// baseName is the cgroup base name of an Engine of process pid (start
// ticks) in pid namespace ns.
func baseName(ns uint64, pid int, ticks, n uint64) string {
	return fmt.Sprintf("%s%d-%d-%d-%d", cgroupPrefix, ns, pid, ticks, n)
}

// pidNamespace is the inode of this process's pid namespace: pids and
// start ticks mean something only within one.
func pidNamespace() (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		return 0, fmt.Errorf("pid namespace: %w", err)
	}
	return st.Ino, nil
}

// newCgroupBase makes an Engine's cgroup base under parent ("": this
// process's cgroup), after sweeping those of dead Engines beside it.
func newCgroupBase(parent string) (*cgroups.Base, error) {
	ns, err := pidNamespace()
	if err != nil {
		return nil, err
	}
	pid := os.Getpid()
	ticks, err := proc.StartTicks(pid)
	if err != nil {
		return nil, err
	}
	base, err := cgroups.Detect(parent, baseName(ns, pid, ticks, uint64(rand.Uint32())))
	if err != nil {
		return nil, err
	}
	sweepDeadBases(filepath.Dir(base.Dir), ns)
	return base, nil
}

// sweepDeadBases removes the cgroup bases in dir of Engines of pid
// namespace ns whose process is gone: their jobs were orphaned when it
// died, and nothing else would ever end them. A base of a live process,
// of another pid namespace (its pids are not ours to look up) or of an
// unexpected name is left alone.
func sweepDeadBases(dir string, ns uint64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, cgroupPrefix) {
			continue
		}
		var bns, ticks, n uint64
		var pid int
		if _, err := fmt.Sscanf(name, cgroupPrefix+"%d-%d-%d-%d", &bns, &pid, &ticks, &n); err != nil ||
			pid <= 0 || bns != ns || name != baseName(bns, pid, ticks, n) {
			continue
		}
		if t, err := proc.StartTicks(pid); err == nil && t == ticks {
			continue // its Engine's process lives (ours among them)
		}
		dead := &cgroups.Base{Dir: filepath.Join(dir, name)}
		for _, c := range dead.Leftovers() {
			_ = c.Kill()
			_ = c.Remove(5 * time.Second)
		}
		_ = dead.Close()
	}
}
