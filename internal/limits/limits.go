// Package limits applies per-job resource limits (open files, address
// space, nice) in the child, before the job's program is executed, without
// a race: Go cannot run code between fork and exec, so the supervisor
// starts a small helper instead — its own executable, re-executed with
// argv[0] set to HelperArg0 — which applies the limits to itself and then
// execve()s the target. The target keeps the helper's pid, process group,
// session, cgroup and descriptors, and inherits the limits.
//
// The supervisor's main (and TestMain of test packages that spawn jobs with
// limits) must call MaybeRunHelper first thing; Wrap builds the exec.Cmd
// Path and Args that start the helper.
package limits

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Limits are applied to the process before it execs the target.
type Limits struct {
	NoFile       uint64 // RLIMIT_NOFILE soft=hard; 0 = unchanged
	AddressSpace uint64 // RLIMIT_AS bytes soft=hard; 0 = unchanged
	Nice         *int   // setpriority(PRIO_PROCESS, 0, n), -20..19; nil = unchanged
}

// Nice values accepted by Limits.Nice.
const (
	MinNice = -20
	MaxNice = 19
)

// HelperArg0 is argv[0] of the helper invocation.
const HelperArg0 = "exec-supervisor-limits"

// Empty reports whether l changes nothing (then no helper is needed).
func (l Limits) Empty() bool {
	return l.NoFile == 0 && l.AddressSpace == 0 && l.Nice == nil
}

// Validate reports limits the helper would refuse (a nice value outside
// MinNice..MaxNice), so that a spawn can be rejected before it starts.
// Limits the kernel refuses (e.g. raising a hard limit without privilege)
// are only found out by the helper.
func (l Limits) Validate() error {
	if l.Nice != nil && (*l.Nice < MinNice || *l.Nice > MaxNice) {
		return fmt.Errorf("nice %d out of range %d..%d", *l.Nice, MinNice, MaxNice)
	}
	return nil
}

// String encodes l as the helper's argument, e.g.
// "nofile=64,as=1048576,nice=5" ("" when l is Empty).
func (l Limits) String() string {
	var parts []string
	if l.NoFile != 0 {
		parts = append(parts, "nofile="+strconv.FormatUint(l.NoFile, 10))
	}
	if l.AddressSpace != 0 {
		parts = append(parts, "as="+strconv.FormatUint(l.AddressSpace, 10))
	}
	if l.Nice != nil {
		parts = append(parts, "nice="+strconv.Itoa(*l.Nice))
	}
	return strings.Join(parts, ",")
}

// parse is the inverse of String; it also validates.
func parse(s string) (Limits, error) {
	var l Limits
	if s == "" {
		return l, nil
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return l, fmt.Errorf("malformed limit %q (want name=value)", kv)
		}
		if seen[k] {
			return l, fmt.Errorf("limit %q given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "nofile":
			l.NoFile, err = strconv.ParseUint(v, 10, 64)
		case "as":
			l.AddressSpace, err = strconv.ParseUint(v, 10, 64)
		case "nice":
			var n int
			n, err = strconv.Atoi(v)
			l.Nice = &n
		default:
			return l, fmt.Errorf("unknown limit %q (want nofile, as or nice)", k)
		}
		if err != nil {
			return l, fmt.Errorf("limit %s: bad value %q", k, v)
		}
	}
	return l, l.Validate()
}

// Wrap returns the Path and Args to give exec.Cmd so that helper (an
// executable whose main calls MaybeRunHelper first) applies l and execs
// path with argv (argv[0] included; empty means {path}). path is used as
// given, not looked up in PATH. When l is Empty no helper is needed and
// Wrap returns path and argv themselves.
func Wrap(helper string, l Limits, path string, argv []string) (cmdPath string, cmdArgs []string) {
	if len(argv) == 0 {
		argv = []string{path}
	}
	if l.Empty() {
		return path, argv
	}
	cmdArgs = make([]string, 0, 3+len(argv))
	cmdArgs = append(cmdArgs, HelperArg0, l.String(), path)
	return helper, append(cmdArgs, argv...)
}

// MaybeRunHelper runs the helper if os.Args[0] is HelperArg0: it parses the
// limits, applies them to this process and syscall.Exec()s the target with
// the given argv and os.Environ(); on any failure it writes
// "exec-supervisor-limits: <why>" to stderr and exits with status 127.
// Otherwise it returns at once, doing nothing. It must be called first
// thing in main() and in TestMain of test packages that spawn jobs with
// limits.
func MaybeRunHelper() {
	if len(os.Args) == 0 || os.Args[0] != HelperArg0 {
		return
	}
	err := runHelper(os.Args[1:])
	os.Stderr.WriteString(HelperArg0 + ": " + err.Error() + "\n")
	os.Exit(127)
}

// runHelper applies the limits in args[0] and execs args[1] with argv
// args[2:]; it returns only on failure.
func runHelper(args []string) error {
	if len(args) < 3 {
		return errors.New("usage: " + HelperArg0 + " LIMITS PATH ARGV0 [ARG...]")
	}
	l, err := parse(args[0])
	if err != nil {
		return err
	}
	path, argv, env := args[1], args[2:], os.Environ()
	// The message for a failed exec is made now: once RLIMIT_AS is set,
	// the runtime may not be able to map memory for it (seen: "fatal
	// error: runtime: out of memory" instead of the message, under a
	// 64 MiB limit). Only an errno's text (static) is added then.
	failed := make([]byte, 0, len(HelperArg0)+len(path)+160)
	failed = append(append(append(failed, HelperArg0...), ": exec "...), path...)
	failed = append(failed, ": "...)
	// The nice value is per thread on Linux, and only the thread that
	// calls execve survives it: set it on the thread that will exec.
	runtime.LockOSThread()
	if l.Nice != nil {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, *l.Nice); err != nil {
			return fmt.Errorf("setpriority %d: %w", *l.Nice, err)
		}
	}
	// Everything the exec needs is made now, before RLIMIT_AS: the
	// runtime may not be able to map memory once it is set (seen, rarely:
	// "fatal error: runtime: out of memory" in syscall.Exec's copies of
	// argv and env, whenever the heap had to grow), so the exec itself is
	// a raw execve of these.
	pathp, err := syscall.BytePtrFromString(path)
	if err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	// syscall.Setrlimit (unlike a raw prlimit) also tells the runtime not
	// to restore, at exec, the soft RLIMIT_NOFILE it raised at start up.
	if l.NoFile != 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: l.NoFile, Max: l.NoFile}); err != nil {
			return fmt.Errorf("setrlimit RLIMIT_NOFILE %d: %w", l.NoFile, err)
		}
	} else {
		// The target gets the soft RLIMIT_NOFILE this process was given,
		// which the runtime raised at start up and keeps to itself: an
		// exec that fails (an empty path) puts it back, as a successful
		// syscall.Exec would have.
		_ = syscall.Exec("", nil, nil)
	}
	// Last, as it may stop this process from mapping more memory.
	if l.AddressSpace != 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: l.AddressSpace, Max: l.AddressSpace}); err != nil {
			return fmt.Errorf("setrlimit RLIMIT_AS %d: %w", l.AddressSpace, err)
		}
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(pathp)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	if len(failed)+len(errno.Error())+1 <= cap(failed) {
		failed = append(append(failed, errno.Error()...), '\n')
		_, _ = syscall.Write(2, failed)
		syscall.Exit(127)
	}
	return fmt.Errorf("exec %s: %w", path, errno)
}
