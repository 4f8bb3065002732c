package limits_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/internal/limits"
	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
)

// TestMain lets this test binary serve as the helper.
func TestMain(m *testing.M) {
	limits.MaybeRunHelper()
	os.Exit(testenv.Main(m))
}

func helper(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func ptr[T any](v T) *T { return &v }

// run starts argv (argv[0] looked up in PATH) under l, waits for it and
// returns its stdout, stderr and exit code. started, if not nil, is
// called with the pid exec.Cmd reports.
func run(t *testing.T, l limits.Limits, argv []string, started func(pid int)) (string, string, int) {
	t.Helper()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		t.Skipf("%s not available: %v", argv[0], err)
	}
	return runPath(t, l, path, argv, started)
}

func runPath(t *testing.T, l limits.Limits, path string, argv []string, started func(pid int)) (string, string, int) {
	t.Helper()
	cmdPath, cmdArgs := limits.Wrap(helper(t), l, path, argv)
	return runCmd(t, cmdPath, cmdArgs, started)
}

func runCmd(t *testing.T, cmdPath string, cmdArgs []string, started func(pid int)) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := &exec.Cmd{Path: cmdPath, Args: cmdArgs, Stdout: &stdout, Stderr: &stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if started != nil {
		started(cmd.Process.Pid)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

func TestWrap(t *testing.T) {
	p, a := limits.Wrap("/h", limits.Limits{NoFile: 64, AddressSpace: 1048576, Nice: ptr(5)}, "/bin/x", []string{"x", "y"})
	want := []string{limits.HelperArg0, "nofile=64,as=1048576,nice=5", "/bin/x", "x", "y"}
	if p != "/h" || strings.Join(a, "|") != strings.Join(want, "|") {
		t.Fatalf("Wrap = %q %q, want /h %q", p, a, want)
	}
	// No limits: no helper.
	p, a = limits.Wrap("/h", limits.Limits{}, "/bin/x", nil)
	if p != "/bin/x" || len(a) != 1 || a[0] != "/bin/x" {
		t.Fatalf("Wrap(empty) = %q %q", p, a)
	}
	if !(limits.Limits{}).Empty() || (limits.Limits{Nice: ptr(0)}).Empty() {
		t.Fatal("Empty wrong")
	}
	if (limits.Limits{Nice: ptr(20)}).Validate() == nil || (limits.Limits{Nice: ptr(-21)}).Validate() == nil ||
		(limits.Limits{Nice: ptr(-20)}).Validate() != nil || (limits.Limits{Nice: ptr(19)}).Validate() != nil {
		t.Fatal("Validate range wrong")
	}
}

func TestNoFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, []byte("content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// 3 descriptors are all taken by stdin, stdout and stderr. A dynamically
	// linked cat fails already in the dynamic loader, which has no strerror
	// and says "Error 24" (EMFILE); a static one says "Too many open files".
	out, errOut, code := run(t, limits.Limits{NoFile: 3}, []string{"cat", file}, nil)
	if code == 0 || !(strings.Contains(errOut, "Too many open files") || strings.Contains(errOut, "Error 24")) {
		t.Fatalf("cat with nofile=3: exit %d, stdout %q, stderr %q; want EMFILE", code, out, errOut)
	}
	// A program that gets going and then runs out says it in words.
	out, errOut, code = run(t, limits.Limits{NoFile: 4}, []string{"sh", "-c", "exec 3<" + file + "; exec 4<" + file + "; echo not reached"}, nil)
	if code == 0 || !strings.Contains(errOut, "Too many open files") {
		t.Fatalf("sh with nofile=4: exit %d, stdout %q, stderr %q; want Too many open files", code, out, errOut)
	}
	out, errOut, code = run(t, limits.Limits{NoFile: 64}, []string{"cat", file}, nil)
	if code != 0 || out != "content\n" {
		t.Fatalf("cat with nofile=64: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestAddressSpace(t *testing.T) {
	dd := []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=512M", "count=1"}
	if _, errOut, code := run(t, limits.Limits{}, dd, nil); code != 0 {
		t.Skipf("dd with a 512 MiB buffer fails here even without a limit: exit %d: %s", code, errOut)
	}
	_, errOut, code := run(t, limits.Limits{AddressSpace: 256 << 20}, dd, nil)
	if code == 0 || !strings.Contains(errOut, "memory exhausted") {
		t.Fatalf("dd under as=256MiB: exit %d, stderr %q; want memory exhausted", code, errOut)
	}
}

func TestNice(t *testing.T) {
	for _, n := range []int{7, 0, 19} {
		out, errOut, code := run(t, limits.Limits{Nice: ptr(n)}, []string{"sh", "-c", "cat /proc/self/stat"}, nil)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		// Fields after the comm's ')': state is field 3, nice field 19.
		i := strings.LastIndexByte(out, ')')
		if i < 0 {
			t.Fatalf("bad stat %q", out)
		}
		f := strings.Fields(out[i+1:])
		if got := f[19-3]; got != strconv.Itoa(n) {
			t.Fatalf("nice = %s, want %d (stat %q)", got, n, out)
		}
	}
}

// lowSoftNoFile makes the soft RLIMIT_NOFILE of this process, and so of the
// helpers it starts, well below the hard one, as on most systems (1024 vs
// 524288 under systemd), so that the Go runtime of the helper raises it at
// start and, unless told otherwise, restores it at exec.
func lowSoftNoFile(t *testing.T) syscall.Rlimit {
	t.Helper()
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	if orig.Max < 256 {
		t.Skipf("hard RLIMIT_NOFILE %d too low to test with", orig.Max)
	}
	low := syscall.Rlimit{Cur: 200, Max: orig.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	return low
}

// TestProcLimits: the target's /proc/self/limits shows exactly our limits,
// not the soft RLIMIT_NOFILE the Go runtime of the helper raised at start
// and would otherwise restore at exec. Raising the soft limit to the hard
// one is the case where that restore would succeed even without
// CAP_SYS_RESOURCE.
func TestProcLimits(t *testing.T) {
	low := lowSoftNoFile(t)
	cases := []limits.Limits{{NoFile: 77, AddressSpace: 1 << 30}}
	if low.Max != ^uint64(0) {
		cases = append(cases, limits.Limits{NoFile: low.Max, AddressSpace: 3 << 30})
	}
	for _, l := range cases {
		out, errOut, code := run(t, l, []string{"sh", "-c", "cat /proc/self/limits"}, nil)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		want := map[string]string{
			"Max open files":    fmt.Sprintf("%d %d", l.NoFile, l.NoFile),
			"Max address space": fmt.Sprintf("%d %d", l.AddressSpace, l.AddressSpace),
		}
		for _, line := range strings.Split(out, "\n") {
			for name, w := range want {
				if rest, ok := strings.CutPrefix(line, name); ok {
					f := strings.Fields(rest)
					if got := strings.Join(f[:2], " "); got != w {
						t.Errorf("limits %q: %s: soft/hard %s, want %s", l, name, got, w)
					}
					delete(want, name)
				}
			}
		}
		if len(want) > 0 {
			t.Fatalf("missing %v in %s", want, out)
		}
	}
}

// TestNoFileUnchanged: with other limits but no NoFile, the target gets
// the RLIMIT_NOFILE the helper was started with (not the soft limit its Go
// runtime raised), as without a helper.
func TestNoFileUnchanged(t *testing.T) {
	low := lowSoftNoFile(t)
	want := fmt.Sprintf("%d\n%d\n", low.Cur, low.Max)
	if low.Max == ^uint64(0) { // RLIM_INFINITY
		want = fmt.Sprintf("%d\nunlimited\n", low.Cur)
	}
	for _, l := range []limits.Limits{{}, {Nice: ptr(1)}, {AddressSpace: 1 << 30}} {
		got, errOut, code := run(t, l, []string{"sh", "-c", "ulimit -Sn; ulimit -Hn"}, nil)
		if code != 0 || got != want {
			t.Fatalf("limits %q: soft/hard nofile %q (exit %d, %s), want %q", l, got, code, errOut, want)
		}
	}
}

func TestPidPreserved(t *testing.T) {
	var pid int
	out, errOut, code := run(t, limits.Limits{NoFile: 64}, []string{"sh", "-c", "echo $$"}, func(p int) { pid = p })
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.TrimSpace(out) != strconv.Itoa(pid) {
		t.Fatalf("target saw pid %q, exec.Cmd started %d", strings.TrimSpace(out), pid)
	}
}

func TestHelperFailures(t *testing.T) {
	h := helper(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed", []string{limits.HelperArg0, "nofile", "/bin/true", "true"}, "malformed limit"},
		{"unknown", []string{limits.HelperArg0, "cpu=1", "/bin/true", "true"}, "unknown limit"},
		{"badnumber", []string{limits.HelperArg0, "as=-1", "/bin/true", "true"}, "bad value"},
		{"twice", []string{limits.HelperArg0, "nice=1,nice=2", "/bin/true", "true"}, "given twice"},
		{"usage", []string{limits.HelperArg0, "nofile=64"}, "usage"},
		{"nice-high", []string{limits.HelperArg0, "nice=20", "/bin/true", "true"}, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runCmd(t, h, tc.args, nil)
			if code != 127 || !strings.HasPrefix(errOut, limits.HelperArg0+": ") || !strings.Contains(errOut, tc.want) || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 127 and %q", code, out, errOut, tc.want)
			}
			t.Logf("%s", strings.TrimSpace(errOut))
		})
	}
	t.Run("nice-via-wrap", func(t *testing.T) {
		_, errOut, code := runPath(t, limits.Limits{Nice: ptr(-21)}, "/bin/true", nil, nil)
		if code != 127 || !strings.Contains(errOut, limits.HelperArg0+": nice -21 out of range") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("missing-target", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "no-such-program")
		_, errOut, code := runPath(t, limits.Limits{NoFile: 64, AddressSpace: 64 << 20, Nice: ptr(3)}, missing, nil, nil)
		want := limits.HelperArg0 + ": exec " + missing + ": no such file or directory"
		if code != 127 || strings.TrimSpace(errOut) != want {
			t.Fatalf("exit %d, stderr %q; want 127, %q", code, errOut, want)
		}
	})
}
