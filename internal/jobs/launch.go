package jobs

import (
	"encoding/binary"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"golang.org/x/sys/unix"
)

// launch is what starting one process takes. The supervisor forks and
// execs itself (syscall.ForkExec) rather than through os/exec: the child's
// ends of its pipes stay plain descriptors and the environment is built
// once (no second pass to deduplicate it).
//
// A process is waited for through its pidfd, in the netpoller: with the
// job's output pipes by Job.runLoop (see pollSet), or alone by
// Job.waitLoop (a terminal's job). No thread is blocked for a running
// job (without pidfds, wait4 blocks one per job).
type launch struct {
	path      string
	argv, env []string
	dir       string
	stdio     [3]int // the child's stdin, stdout, stderr
	sys       *syscall.SysProcAttr
}

// proc is a started process, waited for once by its job's runLoop or
// waitLoop.
type child struct {
	pid int
	// pidfd is nil where the kernel has no usable pidfds (wait then
	// blocks a thread in wait4); else it is non-blocking and in the
	// netpoller.
	pidfd *os.File
	rawfd int // pidfd's descriptor, -1 without (valid until release)
	// startTicks is the process's start time as /proc/<pid>/stat gives
	// it (field 22), known from the boot clock read around the fork when
	// both reads fell in the same clock tick (0: not known so).
	startTicks uint64
}

// atClkTck is the ELF auxiliary vector's AT_CLKTCK: the clock ticks per
// second of the times in /proc (USER_HZ).
const atClkTck = 17

// startTickNanos returns the length in nanoseconds of the clock tick in
// which /proc/<pid>/stat gives a process's start time (1e9/USER_HZ), or 0
// if it cannot be known (the fingerprint is then read from /proc).
func startTickNanos() int64 {
	auxv, err := unix.Auxv()
	if err != nil {
		return 0
	}
	for _, kv := range auxv {
		if kv[0] == atClkTck && kv[1] > 0 && 1e9%uint64(kv[1]) == 0 {
			return int64(1e9 / uint64(kv[1]))
		}
	}
	return 0
}

// startTickChecks is how many fingerprints known from the boot clock are
// checked against /proc before the clock is trusted.
const startTickChecks = 3

// startTicksTrusted reports whether p's start ticks, known from the boot
// clock, may be used: the first startTickChecks are compared with /proc
// (p is not reaped yet: its job's waiter waits for the start to return),
// and one that differs turns the clock's use off for good (logged).
func (m *Manager) startTicksTrusted(p *child) bool {
	if m.tickChecks.Load() <= 0 {
		return m.tickNanos.Load() > 0
	}
	m.tickChecks.Add(-1)
	t, err := proc.StartTicks(p.pid)
	if err != nil {
		m.tickChecks.Add(1) // (not a check: the next one is)
		return false
	}
	if t != p.startTicks {
		m.tickNanos.Store(0)
		m.log.Warn("process start times are read from /proc from now on: the boot clock gave another one", "pid", p.pid, "clock", p.startTicks, "proc", t)
		return false
	}
	return true
}

// bootNanos reads CLOCK_BOOTTIME, the clock a process's start time in
// /proc/<pid>/stat counts on (the kernel stamps it during the fork).
func bootNanos() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return -1
	}
	return ts.Nano()
}

// pidfdsWork reports whether the kernel has what proc needs of pidfds:
// CLONE_PIDFD, waitid(P_PIDFD) (5.4) and poll on them.
func pidfdsWork() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var info [128]byte
	// We are not our own child: ECHILD when P_PIDFD is understood.
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, unix.P_PIDFD, uintptr(fd),
		uintptr(unsafe.Pointer(&info[0])), unix.WEXITED|unix.WNOHANG, 0, 0)
	return errno == syscall.ECHILD
}

// start forks and execs l. withPidfd asks for a pidfd (see pidfdsWork).
// With tick (startTickNanos) not
// 0, the boot clock is read before and after the fork: the child's start
// time is stamped in between, so when both reads are in the same tick,
// that tick is the process's start time in /proc (proc.startTicks),
// known without reading /proc (five system calls on the spawn path).
//
// around, when not nil, runs the fork and exec (see WithForkAround).
func (l *launch) start(withPidfd bool, tick int64, around func(fork func())) (*child, error) {
	pidfd := -1
	if withPidfd {
		l.sys.PidFD = &pidfd
	}
	attr := &syscall.ProcAttr{Dir: l.dir, Env: l.env, Sys: l.sys,
		Files: []uintptr{uintptr(l.stdio[0]), uintptr(l.stdio[1]), uintptr(l.stdio[2])}}
	var before, after int64
	var pid int
	var err error
	fork := func() { // (the clock read right around the fork itself)
		if tick > 0 {
			before = bootNanos()
		}
		pid, err = syscall.ForkExec(l.path, l.argv, attr)
		if tick > 0 {
			after = bootNanos()
		}
	}
	if around != nil {
		around(fork)
	} else {
		fork()
	}
	if err != nil {
		return nil, &os.PathError{Op: "fork/exec", Path: l.path, Err: err}
	}
	p := &child{pid: pid, rawfd: -1}
	if tick > 0 && before >= 0 && after >= before && before/tick == after/tick {
		p.startTicks = uint64(before / tick)
	}
	if pidfd < 0 {
		return p, nil
	}
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd) // wait4 then
		return p, nil
	}
	p.pidfd = os.NewFile(uintptr(pidfd), "pidfd") // (in the netpoller)
	p.rawfd = pidfd
	return p, nil
}

// wait waits until the process exits and reaps it.
func (p *child) wait() (syscall.WaitStatus, error) {
	if p.pidfd == nil {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(p.pid, &ws, 0, nil)
			if err != syscall.EINTR {
				return ws, err
			}
		}
	}
	rc, err := p.pidfd.SyscallConn()
	if err != nil {
		return 0, err
	}
	var ws syscall.WaitStatus
	var werr error
	err = rc.Read(func(fd uintptr) bool {
		var info [128]byte // siginfo_t
		for {
			_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, unix.P_PIDFD, fd,
				uintptr(unsafe.Pointer(&info[0])), unix.WEXITED|unix.WNOHANG, 0, 0)
			switch errno {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN: // a non-blocking pidfd of a live process
				return false
			case 0:
			default:
				werr = errno
				return true
			}
			break
		}
		var exited bool
		ws, exited = childStatus(&info)
		return exited // else not yet: wait for the pidfd to be readable
	})
	if err == nil {
		err = werr
	}
	return ws, err
}

// childStatus reads the SIGCHLD fields of a siginfo_t (si_pid, si_status
// after si_signo, si_errno, si_code and the union's alignment) as a wait
// status; exited is false when waitid found no exited child (si_pid 0).
func childStatus(info *[128]byte) (ws syscall.WaitStatus, exited bool) {
	off := 12
	if unsafe.Sizeof(uintptr(0)) == 8 {
		off = 16
	}
	code := int32(binary.NativeEndian.Uint32(info[8:]))
	pid := int32(binary.NativeEndian.Uint32(info[off:]))
	status := int32(binary.NativeEndian.Uint32(info[off+8:]))
	if pid == 0 {
		return 0, false
	}
	const cldExited, cldDumped = 1, 3 // si_code of SIGCHLD (CLD_KILLED is 2)
	switch code {
	case cldExited:
		return syscall.WaitStatus((status & 0xff) << 8), true
	case cldDumped:
		return syscall.WaitStatus(status&0x7f | 0x80), true
	default: // CLD_KILLED
		return syscall.WaitStatus(status & 0x7f), true
	}
}

// unreaped reports whether the process has not been reaped yet (alive or
// a zombie). With a pidfd this is immune to pid reuse.
func (p *child) unreaped() bool {
	if p.pidfd == nil {
		return syscall.Kill(p.pid, 0) == nil
	}
	rc, err := p.pidfd.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	if rc.Control(func(fd uintptr) {
		ok = unix.PidfdSendSignal(int(fd), 0, nil, 0) == nil
	}) != nil {
		return false
	}
	return ok
}

// release closes the pidfd (after wait).
func (p *child) release() {
	if p.pidfd != nil {
		p.pidfd.Close()
	}
}

// setEnv returns env with key=val, replacing an inherited value (the
// child must not see two: most programs take the first). env itself is
// not modified (it may be the supervisor's own, shared).
func setEnv(env []string, key, val string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k != key {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+val)
}
