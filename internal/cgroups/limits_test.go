package cgroups

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testBase makes a base for job cgroups the way the server does (in this
// process's own cgroup), removed at the end, or skips.
func testBase(t *testing.T) *Base {
	t.Helper()
	base, err := Detect("", fmt.Sprintf("exec-supervisor-limits-test-%d", os.Getpid()))
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	t.Cleanup(func() {
		if err := base.Close(); err != nil {
			t.Error(err)
		}
	})
	return base
}

func testCgroup(t *testing.T, base *Base, id string) *Cgroup {
	t.Helper()
	cg, fd, err := base.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	fd.Close()
	t.Cleanup(func() {
		if err := cg.Remove(5 * time.Second); err != nil {
			t.Error(err)
		}
	})
	return cg
}

// TestSetLimits on the real hierarchy: each limit is either applied and
// written, or unavailable with a reason naming the controller and the base.
func TestSetLimits(t *testing.T) {
	base := testBase(t)
	cg := testCgroup(t, base, "j-limits")
	ctrls := base.Controllers()
	t.Logf("controllers for job cgroups in %s: %q", base.Dir, ctrls)
	res := cg.SetLimits(256<<20, 50)
	t.Logf("applied %q, unavailable %q", res.Applied, res.Unavailable)
	type limit struct{ file, ctrl, value string }
	var applied, unavailable []limit
	for _, l := range []limit{{"memory.max", "memory", "268435456"}, {"cpu.weight", "cpu", "50"}} {
		a := slices.Contains(res.Applied, l.file+"="+l.value)
		why, u := res.Unavailable[l.file]
		switch {
		case a == u:
			t.Errorf("%s: applied %v and unavailable %v (%q)", l.file, a, u, why)
		case a:
			applied = append(applied, l)
		default:
			unavailable = append(unavailable, l)
		}
	}
	t.Run("unavailable-reasons", func(t *testing.T) {
		for _, l := range unavailable {
			why := res.Unavailable[l.file]
			if want := l.ctrl + " controller not available in " + base.Dir + ": "; !strings.HasPrefix(why, want) || len(why) == len(want) {
				t.Errorf("%s: reason %q, want %q and why", l.file, why, want)
			}
			if slices.Contains(ctrls, l.ctrl) && !strings.Contains(why, "enabling it in cgroup.subtree_control failed: ") {
				t.Errorf("%s: listed for the base but not enabled, reason %q lacks the errno", l.file, why)
			}
			if !slices.Contains(ctrls, l.ctrl) && !strings.Contains(why, "not enabled in ") && !strings.Contains(why, "the cgroup v2 hierarchy does not have it") {
				t.Errorf("%s: not listed for the base, reason %q does not say where it is missing", l.file, why)
			}
		}
	})
	t.Run("written", func(t *testing.T) {
		for _, l := range applied {
			b, err := os.ReadFile(filepath.Join(cg.Path, l.file))
			if err != nil || strings.TrimSpace(string(b)) != l.value {
				t.Errorf("%s reads %q (%v), want %s", l.file, b, err, l.value)
			}
		}
		if len(unavailable) > 0 {
			var names []string
			for _, l := range unavailable {
				names = append(names, l.ctrl)
			}
			t.Skipf("controllers %v are not available to job cgroups in %s (reasons above), so their limits cannot be checked as written here", names, base.Dir)
		}
	})
}

func TestSetLimitsInvalidAndNothing(t *testing.T) {
	cg := &Cgroup{Path: filepath.Join(t.TempDir(), "j-x")} // never touched
	res := cg.SetLimits(-1, 10001)
	if len(res.Applied) != 0 || !strings.Contains(res.Unavailable["memory.max"], "invalid value -1") ||
		!strings.Contains(res.Unavailable["cpu.weight"], "invalid value 10001") {
		t.Fatalf("%+v", res)
	}
	if res := cg.SetLimits(0, 0); len(res.Applied) != 0 || len(res.Unavailable) != 0 {
		t.Fatalf("nothing asked, got %+v", res)
	}
}

// fakeTree builds the cgroup directories root/<base>/j-1 (and those in
// between; base defaults to "base") with empty interface files, then the
// given contents, to exercise the paths the machine at hand may not have.
func fakeTree(t *testing.T, base string, files map[string]string) (root string, cg *Cgroup) {
	t.Helper()
	if base == "" {
		base = "base"
	}
	root = filepath.Join(t.TempDir(), "root")
	dirs := []string{""}
	for d := base; d != "."; d = filepath.Dir(d) {
		dirs = append(dirs, d)
	}
	for _, d := range append(dirs, base+"/j-1") {
		dir := filepath.Join(root, d)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control", "cgroup.procs"} {
			if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, &Cgroup{Path: filepath.Join(root, base, "j-1")}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSetLimitsEnablesControllers(t *testing.T) {
	root, cg := fakeTree(t, "", map[string]string{
		"base/cgroup.controllers": "cpu memory pids\n",
		"base/j-1/memory.max":     "max\n",
		"base/j-1/cpu.weight":     "100\n",
	})
	var writes []string
	logged := func(path, value string) error {
		rel, _ := filepath.Rel(root, path)
		writes = append(writes, rel+"<"+value)
		return writeCgroupFile(path, value)
	}
	res := cg.setLimits(1<<20, 7, logged)
	if strings.Join(res.Applied, " ") != "memory.max=1048576 cpu.weight=7" || len(res.Unavailable) != 0 {
		t.Fatalf("%+v", res)
	}
	want := "base/cgroup.subtree_control<+memory base/j-1/memory.max<1048576 base/cgroup.subtree_control<+cpu base/j-1/cpu.weight<7"
	if got := strings.Join(writes, " "); got != want {
		t.Fatalf("writes %s, want %s", got, want)
	}
	if got := read(t, filepath.Join(cg.Path, "memory.max")); got != "1048576" {
		t.Fatalf("memory.max %q", got)
	}
	// Already enabled: not written again.
	if err := os.WriteFile(filepath.Join(root, "base/cgroup.subtree_control"), []byte("cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writes = nil
	if res := cg.setLimits(2<<20, 0, logged); len(res.Applied) != 1 || strings.Join(writes, " ") != "base/j-1/memory.max<2097152" {
		t.Fatalf("%+v, writes %q", res, writes)
	}
	if got := (&Base{Dir: filepath.Join(root, "base")}).Controllers(); strings.Join(got, " ") != "cpu memory pids" {
		t.Fatalf("Controllers %q", got)
	}
}

// TestSetLimitsBusyParent: the kernel refuses to enable a controller in a
// base that holds processes; the reason says so and what to do.
func TestSetLimitsBusyParent(t *testing.T) {
	_, cg := fakeTree(t, "", map[string]string{"base/cgroup.controllers": "cpu memory\n"})
	busy := func(path, value string) error {
		return &os.PathError{Op: "write", Path: path, Err: syscall.EBUSY}
	}
	res := cg.setLimits(1<<20, 0, busy)
	why := res.Unavailable["memory.max"]
	for _, want := range []string{"memory controller not available in " + filepath.Dir(cg.Path), "device or resource busy", "no internal processes", "--cgroup-parent"} {
		if !strings.Contains(why, want) {
			t.Errorf("reason %q lacks %q", why, want)
		}
	}
	if len(res.Applied) != 0 || len(res.Unavailable) != 1 {
		t.Fatalf("%+v", res)
	}
}

// TestSetLimitsWhyMissing: a controller the base does not list is explained
// by the ancestor that does not pass it on, or the hierarchy lacking it.
func TestSetLimitsWhyMissing(t *testing.T) {
	// The root has memory but does not enable it for base's parent... here
	// root is base's parent, and it has processes of its own (allowed for
	// the root, so no hint about them).
	root, cg := fakeTree(t, "", map[string]string{
		"cgroup.controllers": "cpu memory\n",
		"cgroup.procs":       "1\n",
	})
	res := cg.SetLimits(1<<20, 5)
	want := "memory controller not available in " + filepath.Join(root, "base") + ": not enabled in the parent's cgroup.subtree_control (" + filepath.Join(root, "cgroup.subtree_control") + ")"
	if got := res.Unavailable["memory.max"]; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	if !strings.Contains(res.Unavailable["cpu.weight"], "cpu controller not available") {
		t.Errorf("%+v", res)
	}

	// A non-root parent that has the controller but holds processes.
	root, cg = fakeTree(t, "mid/base", map[string]string{
		"cgroup.controllers":     "memory\n",
		"cgroup.subtree_control": "memory\n",
		"mid/cgroup.controllers": "memory\n",
		"mid/cgroup.procs":       "4242\n",
	})
	mid := filepath.Join(root, "mid")
	got := cg.SetLimits(1<<20, 0).Unavailable["memory.max"]
	for _, want := range []string{"not enabled in the parent's cgroup.subtree_control (" + filepath.Join(mid, "cgroup.subtree_control") + ")", mid + " holds processes", "no internal processes", "--cgroup-parent"} {
		if !strings.Contains(got, want) {
			t.Errorf("reason %q lacks %q", got, want)
		}
	}

	// Further up: the gap is named by path.
	root, cg = fakeTree(t, "a/b/base", map[string]string{"cgroup.controllers": "memory\n"})
	got = cg.SetLimits(1<<20, 0).Unavailable["memory.max"]
	if want := "not enabled in " + filepath.Join(root, "cgroup.subtree_control"); !strings.HasSuffix(got, want) {
		t.Errorf("reason %q, want ...%q", got, want)
	}

	// The hierarchy has no such controller at all.
	root, cg = fakeTree(t, "", map[string]string{"cgroup.controllers": "hugetlb\n"})
	got = cg.SetLimits(0, 50).Unavailable["cpu.weight"]
	if want := "cpu controller not available in " + filepath.Join(root, "base") + ": the cgroup v2 hierarchy does not have it (its root " + root + " offers: hugetlb)"; !strings.HasPrefix(got, want) {
		t.Errorf("reason %q, want %q...", got, want)
	}
}
