package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestGlobalFlagsAfterCommand: the global flags are taken after the
// command as before it (they were refused there), up to "--" and, for
// spawn, the job's command.
func TestGlobalFlagsAfterCommand(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--", "true")
	s.waitExited(t, id)
	ctl, ev := "--control="+s.control, "--event="+s.event
	code, out, errs := execctl(t, "list", "--json", "--control", s.control, "--event", s.event)
	if code != 0 || !strings.Contains(jsonObject(t, out)["jobs"].([]any)[0].(map[string]any)["jobId"].(string), id) {
		t.Fatalf("list --json --control ...: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = execctl(t, "status", id, ctl, ev, "--json", "--request-timeout", "5s")
	if code != 0 || jobOf(t, jsonObject(t, out))["jobId"] != id {
		t.Fatalf("status J --control ... --json: exit %d\n%s\n%s", code, out, errs)
	}
	// Before and after: the one after wins.
	if code, out, errs = execctl(t, "--json=false", "health", ctl, ev, "--json"); code != 0 || !strings.HasPrefix(out, "{") {
		t.Fatalf("--json=false health --json: exit %d\n%s\n%s", code, out, errs)
	}
	// Nothing after "--", nor after spawn's command, is execctl's.
	for _, args := range [][]string{{"spawn", ctl, ev, "--follow", "--", "echo", "--json"}, {"spawn", ctl, ev, "--follow", "echo", "--json"}} {
		if code, out, errs = execctl(t, args...); code != 0 || out != "--json\n" {
			t.Fatalf("%q: exit %d, stdout %q\n%s", args, code, out, errs)
		}
	}
	// A bad value is a usage error wherever it is.
	for _, args := range [][]string{{"health", ctl, "--request-timeout", "soon"}, {"health", "--request-timeout", "-1s"}, {"health", "--control", "bogus"}} {
		if code, _, errs = execctl(t, args...); code != exitUsage || !strings.Contains(errs, "hint:") && !strings.Contains(errs, "must be positive") {
			t.Errorf("%q: exit %d\n%s", args, code, errs)
		}
	}
	// The command's help says so; completion offers them after the command.
	if _, _, errs = execctl(t, "list", "--help"); !strings.Contains(errs, "Global flags") || strings.Contains(errs, "--request-timeout") {
		t.Errorf("list --help (global flags mentioned, not listed):\n%s", errs)
	}
	code, script, _ := execctl(t, "completion", "bash")
	f := filepath.Join(shortTempDir(t), "c.bash")
	if code != 0 || os.WriteFile(f, []byte(script), 0o600) != nil {
		t.Fatal("completion bash")
	}
	check := `source ` + f + `; COMP_WORDS=(execctl list --js); COMP_CWORD=2; _execctl; echo "${COMPREPLY[*]}"`
	if o, err := exec.Command("bash", "-c", check).CombinedOutput(); err != nil || strings.TrimSpace(string(o)) != "--json" {
		t.Errorf("completion of list --js: %v %q", err, o)
	}
}

// TestGlobalFlagClash: a command's own flag of a global flag's name is
// the command's (the global is still taken before the command).
func TestGlobalFlagClash(t *testing.T) {
	g := &globals{stdout: io.Discard, stderr: io.Discard}
	if err := g.globalFlags().Parse([]string{"--json", "--control", "ipc:///before"}); err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("execctl x", pflag.ContinueOnError)
	own := fs.String("json", "", "a command's own --json")
	g.addGlobals(fs)
	if err := fs.Parse([]string{"--json", "pretty", "--control", "ipc:///after", "arg"}); err != nil {
		t.Fatal(err)
	}
	if *own != "pretty" || !g.json || g.control != "ipc:///after" || fs.Arg(0) != "arg" {
		t.Fatalf("own --json %q, global json %v, control %q, args %q", *own, g.json, g.control, fs.Args())
	}
	if fs.Lookup("control").Hidden != true || g.flags.Lookup("control").Hidden {
		t.Fatal("the global flags are hidden in the command's help, and only there")
	}
}
