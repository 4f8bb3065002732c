// Package cgroups gives each job a cgroup v2 of its own when the machine
// has a writable cgroup v2 hierarchy, so that every process a job starts,
// including ones that leave its process group or session (setsid, double
// fork, daemonizing tools), stays attributable and can be killed.
//
// It detects the hierarchy (/sys/fs/cgroup, or a cgroup2 mount elsewhere
// such as /sys/fs/cgroup/unified) from /proc/self/mountinfo and uses the
// supervisor's own cgroup, or a configured one, as the parent. Without a
// usable hierarchy, Detect says why and the caller falls back to process
// groups. SetLimits sets memory.max and cpu.weight on a job's cgroup where
// those controllers can be had, and says why not where they cannot.
package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Base is the directory under which job cgroups are created. It keeps a
// small pool of empty cgroups of finished jobs for reuse: a cgroup is
// only ever entered at clone time, so an empty one stays empty, and
// reusing it spares the next job the mkdir and this one the rmdir (both
// on the spawn path).
type Base struct {
	Dir string
	// Path is Dir as /proc/<pid>/cgroup names it (its path in the
	// cgroup v2 hierarchy).
	Path string

	mu   sync.Mutex
	idle []*Cgroup
	tag  string // names of new cgroups: c-<tag>-<n>
	next uint64
}

// poolMax bounds the idle cgroups kept for reuse.
const poolMax = 32

// Detect finds a writable cgroup v2 directory for job cgroups: parent if
// given (a path inside the cgroup2 mount, or relative to it), else the
// supervisor's own cgroup, with a child named name created in it (one per
// state directory, so two supervisors never share one).
func Detect(parent, name string) (*Base, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return nil, err
	}
	own, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	ownDir := filepath.Join(mnt, own)
	dir := parent
	if dir == "" {
		dir = ownDir
	} else if !strings.HasPrefix(dir, mnt) {
		dir = filepath.Join(mnt, dir)
	}
	// A process is cloned into a job cgroup only by one who may write
	// cgroup.procs of the cgroup above both ours and it: made but not
	// usable, every spawn would fail.
	common := ownDir
	for common != mnt && !strings.HasPrefix(dir+"/", common+"/") {
		common = filepath.Dir(common)
	}
	if err := unix.Access(filepath.Join(common, "cgroup.procs"), unix.W_OK); err != nil {
		return nil, fmt.Errorf("cannot move processes into cgroups under %s: no write access to %s: %w", dir, filepath.Join(common, "cgroup.procs"), err)
	}
	base := filepath.Join(dir, name)
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup v2 at %s is not writable: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("%s is not a cgroup v2 directory: %w", base, err)
	}
	rel := "/" + strings.TrimPrefix(strings.TrimPrefix(base, mnt), "/")
	return &Base{Dir: base, Path: rel, tag: strconv.FormatInt(time.Now().UnixNano(), 36)}, nil
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
	if p, ok := UnifiedPath(b); ok {
		return p, nil
	}
	return "", errors.New("the supervisor is in no cgroup v2")
}

// UnifiedPath returns the cgroup v2 path ("0::/path") of a
// /proc/<pid>/cgroup file's content; false when it names none.
func UnifiedPath(b []byte) (string, bool) {
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "0::"); ok {
			return p, true
		}
	}
	return "", false
}

// Cgroup is one job's cgroup.
type Cgroup struct {
	Path string
	// noReuse: limits were written or it was killed (see Kill); the
	// cgroup is removed rather than handed to another job.
	noReuse bool
	// events is cgroup.events kept open (read with pread: the empty
	// check after every job's exit is on its critical path). A plain
	// descriptor, 0 when not open: (*os.File).Fd would switch it to
	// blocking mode, one more system call, on every read.
	emu    sync.Mutex
	events int
	// dir is the cgroup directory kept open for SysProcAttr.CgroupFD
	// while the cgroup is in the pool and in use; dirFd is its number
	// (taken once: Fd costs a system call every time).
	dir   *os.File
	dirFd int
	// cpuBase is cpu.stat usage_usec when the cgroup went into the pool:
	// what its earlier jobs used (see Usage).
	cpuBase atomic.Int64
}

// Create makes a new cgroup named name and returns it with an open
// directory descriptor for SysProcAttr.CgroupFD (the caller closes it
// after start).
func (b *Base) Create(name string) (*Cgroup, *os.File, error) {
	p := filepath.Join(b.Dir, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, nil, fmt.Errorf("create cgroup: %w", err) // (the error names p)
	}
	fd, err := os.Open(p)
	if err != nil {
		os.Remove(p)
		return nil, nil, fmt.Errorf("open cgroup: %w", err)
	}
	return &Cgroup{Path: p}, fd, nil
}

// Acquire returns an empty cgroup for a job, from the pool when one is
// idle (fresh: always a new one, e.g. for a job that gets limits), and
// its directory descriptor for SysProcAttr.CgroupFD. The descriptor
// belongs to the cgroup (closed when it is removed): do not close it.
func (b *Base) Acquire(fresh bool) (*Cgroup, int, error) {
	b.mu.Lock()
	var c *Cgroup
	if n := len(b.idle); n > 0 && !fresh {
		c = b.idle[n-1]
		b.idle = b.idle[:n-1]
	}
	b.next++
	name := fmt.Sprintf("c-%s-%d", b.tag, b.next)
	b.mu.Unlock()
	if c != nil && c.dir != nil {
		return c, c.dirFd, nil
	}
	c, dir, err := b.Create(name)
	if err != nil {
		return nil, -1, err
	}
	c.dir, c.dirFd = dir, int(dir.Fd())
	return c, c.dirFd, nil
}

// Release hands back the cgroup of a finished job: kept for reuse when
// it is empty (empty: the caller just saw it so) and the pool has room,
// else removed (waiting up to d for it to empty).
func (b *Base) Release(c *Cgroup, empty bool, d time.Duration) error {
	// Only an empty cgroup whose CPU use so far is known is reused
	// (usage counts from there; nothing runs in it until then).
	if !c.noReuse && (empty || !c.Populated()) && c.markCPUBase() == nil {
		b.mu.Lock()
		if len(b.idle) < poolMax {
			b.idle = append(b.idle, c)
			b.mu.Unlock()
			return nil
		}
		b.mu.Unlock()
	}
	return c.Remove(d)
}

// Open returns the cgroup at path (for recovery); nil if it does not exist.
func Open(path string) *Cgroup {
	if _, err := os.Stat(filepath.Join(path, "cgroup.procs")); err != nil {
		return nil
	}
	return &Cgroup{Path: path}
}

// OpenRecorded returns the job cgroup at path, a path a journal recorded,
// if it still exists and is one a supervisor made: absolute and clean,
// inside the cgroup v2 mount, in a base directory named with basePrefix
// (say, a base of the same state directory under another name, or under
// another --cgroup-parent). Nil otherwise: a recorded path is never
// trusted to name any cgroup at all.
func OpenRecorded(path, basePrefix string) *Cgroup {
	if path == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil
	}
	mnt, err := cgroup2Mount()
	if err != nil || !strings.HasPrefix(path, mnt+"/") {
		return nil
	}
	name := filepath.Base(path) // c-<tag>-<n> (j-<job id> in older versions)
	if !strings.HasPrefix(filepath.Base(filepath.Dir(path)), basePrefix) || !(strings.HasPrefix(name, "c-") || strings.HasPrefix(name, "j-")) {
		return nil
	}
	return Open(path)
}

// Procs lists the processes in the cgroup.
func (c *Cgroup) Procs() []int {
	b, err := os.ReadFile(filepath.Join(c.Path, "cgroup.procs"))
	if err != nil {
		return nil
	}
	return parsePids(b, nil)
}

// Populated reports whether any process is in the cgroup.
func (c *Cgroup) Populated() bool {
	c.emu.Lock()
	defer c.emu.Unlock()
	if c.events <= 0 {
		fd, err := unix.Open(filepath.Join(c.Path, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return len(c.Procs()) > 0
		}
		c.events = fd
	}
	// One pread (ReadAt would read again to see EOF): the file is a few
	// bytes, read whole at once.
	var buf [256]byte
	n, err := unix.Pread(c.events, buf[:], 0)
	if n <= 0 || err != nil {
		return len(c.Procs()) > 0
	}
	return bytes.Contains(buf[:n], []byte("populated 1"))
}

// closeFiles closes the descriptors the cgroup keeps open.
func (c *Cgroup) closeFiles() {
	c.emu.Lock()
	defer c.emu.Unlock()
	if c.events > 0 {
		unix.Close(c.events)
		c.events = 0
	}
	if c.dir != nil {
		c.dir.Close()
		c.dir = nil
	}
}

// Signal sends sig to every process in the cgroup. Each pid read from
// cgroup.procs is signalled through a pidfd opened after the read and
// checked to be in the cgroup still (/proc/PID/cgroup): a member that
// exited and was reaped meanwhile, its pid reused by another process, is
// not signalled. (Without pidfds, plain kill.)
func (c *Cgroup) Signal(sig syscall.Signal) {
	for _, pid := range c.Procs() {
		fd, err := unix.PidfdOpen(pid, 0)
		if err == unix.ENOSYS {
			_ = syscall.Kill(pid, sig)
			continue
		}
		if err != nil {
			continue // (gone)
		}
		if c.holds(pid) {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
}

// holds reports whether process pid is in the cgroup, from its cgroup v2
// line in /proc/PID/cgroup ("0::/path", relative to the cgroup2 root).
func (c *Cgroup) holds(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			return len(rel) > 1 && strings.HasSuffix(c.Path, rel)
		}
	}
	return false
}

// Kill kills every process in the cgroup: cgroup.kill where the kernel has
// it, else freeze, SIGKILL each process, thaw. Either way the cgroup is not
// reused: some kernels (seen on 6.18) kill every process later cloned into
// a cgroup that was ever cgroup.kill'ed (CLONE_INTO_CGROUP compares the
// kill count of the parent's cgroup with the target's), which made every
// job after one SIGKILLed job die at birth.
func (c *Cgroup) Kill() error {
	c.noReuse = true
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
			c.closeFiles() // left for the leftover sweep at the next start
			return fmt.Errorf("cgroup %s still has processes %v", c.Path, c.Procs())
		}
		time.Sleep(5 * time.Millisecond) // no cheaper notification than polling cgroup.events here
	}
	c.closeFiles()
	if err := removeTree(c.Path); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", c.Path, err)
	}
	return nil
}

// removeTree removes the empty cgroup dir and the cgroups below it,
// deepest first: a job may have made cgroups of its own (a supervisor or a
// pkg/local Engine run as a job), and a cgroup with children cannot be
// removed. Everything in it is the job's, so ours.
func removeTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Leftovers lists the job cgroups under b (for reconciliation at start):
// every directory in it is one (only this supervisor creates them).
func (b *Base) Leftovers() []*Cgroup {
	ents, err := os.ReadDir(b.Dir)
	if err != nil {
		return nil
	}
	var out []*Cgroup
	for _, e := range ents {
		if e.IsDir() {
			if c := Open(filepath.Join(b.Dir, e.Name())); c != nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// Close removes the idle cgroups, then the base directory if no job
// cgroup is left in it.
func (b *Base) Close() error {
	b.mu.Lock()
	idle := b.idle
	b.idle = nil
	b.mu.Unlock()
	for _, c := range idle {
		c.closeFiles()
		_ = os.Remove(c.Path)
	}
	if err := os.Remove(b.Dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", b.Dir, err)
	}
	return nil
}

// LimitResult says which limits were applied and why others were not.
type LimitResult struct {
	Applied     []string          // e.g. "memory.max=268435456", "cpu.weight=50"
	Unavailable map[string]string // limit name -> reason, e.g. "memory.max": "memory controller not available in /sys/fs/cgroup/unified/...: not enabled in the parent's cgroup.subtree_control"
}

// SetLimits writes memory.max (bytes, 0 = skip) and cpu.weight (1..10000,
// 0 = skip) on c before any process is in it.
// It tries to enable the needed controller in the parent (Base dir)
// cgroup.subtree_control ("+memory", "+cpu") when the controller is listed
// in the parent's cgroup.controllers; failures (including invalid values)
// become Unavailable entries with the errno text; it never fails the job.
func (c *Cgroup) SetLimits(memoryMax int64, cpuWeight int) LimitResult {
	return c.setLimits(memoryMax, cpuWeight, writeCgroupFile)
}

// setLimits is SetLimits writing interface files with write (tests make
// the kernel refuse through it).
func (c *Cgroup) setLimits(memoryMax int64, cpuWeight int, write func(path, value string) error) LimitResult {
	c.noReuse = true
	res := LimitResult{Unavailable: map[string]string{}}
	parent := filepath.Dir(c.Path)
	set := func(file, ctrl, value string) {
		if why := enableController(parent, ctrl, write); why != "" {
			res.Unavailable[file] = why
		} else if err := write(filepath.Join(c.Path, file), value); err != nil {
			res.Unavailable[file] = err.Error()
		} else {
			res.Applied = append(res.Applied, file+"="+value)
		}
	}
	switch {
	case memoryMax < 0:
		res.Unavailable["memory.max"] = fmt.Sprintf("invalid value %d: want bytes > 0 (0 = no limit)", memoryMax)
	case memoryMax > 0:
		set("memory.max", "memory", strconv.FormatInt(memoryMax, 10))
	}
	switch {
	case cpuWeight < 0 || cpuWeight > 10000:
		res.Unavailable["cpu.weight"] = fmt.Sprintf("invalid value %d: want 1..10000 (0 = unchanged)", cpuWeight)
	case cpuWeight > 0:
		set("cpu.weight", "cpu", strconv.Itoa(cpuWeight))
	}
	return res
}

// Controllers lists the controllers available to job cgroups under b (the
// base's cgroup.controllers), for health reporting.
func (b *Base) Controllers() []string {
	ctrls, _ := readFields(filepath.Join(b.Dir, "cgroup.controllers"))
	return ctrls
}

// writeCgroupFile writes an interface file that must exist (no O_CREAT: a
// missing file means a missing controller, not one to make up).
func writeCgroupFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

func readFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// hasProcs reports whether the cgroup dir has processes of its own.
func hasProcs(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	return err == nil && len(strings.TrimSpace(string(b))) > 0
}

// isCgroup reports whether dir is a cgroup v2 directory.
func isCgroup(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "cgroup.controllers"))
	return err == nil
}

const internalProcsHint = `cgroup v2's "no internal processes" rule allows enabling domain controllers for the children of a (non-root) cgroup only while it has no processes of its own: point --cgroup-parent at a delegated subtree without processes`

// enableController makes ctrl available to the children of dir (a Base
// dir): "" if it is, else why not.
func enableController(dir, ctrl string, write func(path, value string) error) string {
	if sub, _ := readFields(filepath.Join(dir, "cgroup.subtree_control")); slices.Contains(sub, ctrl) {
		return ""
	}
	prefix := fmt.Sprintf("%s controller not available in %s: ", ctrl, dir)
	avail, err := readFields(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return prefix + err.Error()
	}
	if !slices.Contains(avail, ctrl) {
		return prefix + whyMissing(dir, ctrl)
	}
	err = write(filepath.Join(dir, "cgroup.subtree_control"), "+"+ctrl)
	if err == nil {
		return ""
	}
	why := prefix + "enabling it in cgroup.subtree_control failed: " + err.Error()
	if errors.Is(err, syscall.EBUSY) {
		why += " (" + dir + " holds processes; " + internalProcsHint + ")"
	}
	return why
}

// whyMissing explains why ctrl is not in dir's cgroup.controllers: the
// nearest ancestor that has it does not pass it on, or the cgroup v2
// hierarchy does not have it at all.
func whyMissing(dir, ctrl string) string {
	for d := dir; ; {
		p := filepath.Dir(d)
		if p == d || !isCgroup(p) { // d is the root of the hierarchy
			root, _ := readFields(filepath.Join(d, "cgroup.controllers"))
			why := fmt.Sprintf("the cgroup v2 hierarchy does not have it (its root %s offers: %s)", d, strings.Join(root, " "))
			if v1 := cgroup1Mount(ctrl); v1 != "" {
				why += fmt.Sprintf("; it is attached to the cgroup v1 hierarchy at %s (hybrid mode)", v1)
			}
			return why
		}
		if ctrls, _ := readFields(filepath.Join(p, "cgroup.controllers")); slices.Contains(ctrls, ctrl) {
			why := "not enabled in " + filepath.Join(p, "cgroup.subtree_control")
			if d == dir {
				why = "not enabled in the parent's cgroup.subtree_control (" + filepath.Join(p, "cgroup.subtree_control") + ")"
			}
			if isCgroup(filepath.Dir(p)) && hasProcs(p) {
				why += "; " + p + " holds processes, and " + internalProcsHint
			}
			return why
		}
		d = p
	}
}

// cgroup1Mount returns where a cgroup v1 hierarchy with ctrl is mounted,
// or "".
func cgroup1Mount(ctrl string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		left, right, ok := strings.Cut(line, " - ")
		rf, lf := strings.Fields(right), strings.Fields(left)
		if ok && len(rf) >= 3 && rf[0] == "cgroup" && len(lf) >= 5 && slices.Contains(strings.Split(rf[2], ","), ctrl) {
			return lf[4]
		}
	}
	return ""
}
