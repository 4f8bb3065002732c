package lifecycle

import (
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txt with what Step does now")

// TestTranscripts runs the sequences in testdata/*.txt: each block is an
// event, a line "----", and what Step made of it (the state and flags
// after, and the effects, or the error). go test -update rewrites them;
// read the diff before committing it.
//
// Events: init [service] [queued]; dequeued; kill reason=R [hard]; started; grace-over;
// hangup-due; leader-exited; group-outlived; group-gone; run-ended
// [signaled] [spawn-failed] [restart delay=D] [limited] [closing];
// restart-due; next-run; drained.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := replay(string(b))
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(f, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got != string(b) {
				t.Errorf("%s differs from what Step does (go test -update, then read the diff):\n%s", f, got)
			}
		})
	}
}

// replay runs a transcript's events and returns the transcript with each
// block's output as Step gives it now.
func replay(text string) (string, error) {
	var out strings.Builder
	var l Life
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if line == "" {
			continue // (blocks end with one, written below)
		}
		if strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		ev, init, err := parseEvent(line)
		if err != nil {
			return "", fmt.Errorf("line %d: %w", i+1, err)
		}
		out.WriteString(line + "\n----\n")
		// Skip the recorded output: up to a blank line or the end.
		if i+1 < len(lines) && lines[i+1] == "----" {
			i++
			for i+1 < len(lines) && lines[i+1] != "" {
				i++
			}
		}
		out.WriteString(apply(&l, ev, init) + "\n")
	}
	return out.String(), nil
}

// apply applies ev (or init) to *l and describes the outcome, ending with
// a blank line.
func apply(l *Life, ev Event, init *Life) string {
	if init != nil {
		*l = *init
		return describe(*l) + "\n"
	}
	next, effs, err := Step(*l, ev)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	*l = next
	s := describe(*l) + "\n"
	if len(effs) > 0 {
		var names []string
		for _, e := range effs {
			names = append(names, effectName(e))
		}
		s += "effects: " + strings.Join(names, ", ") + "\n"
	}
	return s
}

func parseEvent(line string) (Event, *Life, error) {
	f := strings.Fields(line)
	args := map[string]string{}
	for _, a := range f[1:] {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	flag := func(k string) bool { _, ok := args[k]; return ok }
	switch f[0] {
	case "init":
		l := &Life{Service: flag("service")}
		if flag("queued") {
			l.State = Queued
		}
		return nil, l, nil
	case "dequeued":
		return Dequeued{}, nil, nil
	case "kill":
		return Kill{Reason: protocol.Reason(args["reason"]), Hard: flag("hard")}, nil, nil
	case "started":
		return Started{}, nil, nil
	case "grace-over":
		return GraceOver{}, nil, nil
	case "hangup-due":
		return HangupDue{}, nil, nil
	case "leader-exited":
		return LeaderExited{}, nil, nil
	case "group-outlived":
		return GroupOutlived{}, nil, nil
	case "group-gone":
		return GroupGone{}, nil, nil
	case "restart-due":
		return RestartDue{}, nil, nil
	case "next-run":
		return NextRun{}, nil, nil
	case "drained":
		return Drained{}, nil, nil
	case "run-ended":
		e := RunEnded{Signaled: flag("signaled"), SpawnFailed: flag("spawn-failed")}
		e.Verdict.Limited, e.Verdict.Closing = flag("limited"), flag("closing")
		if flag("restart") {
			e.Verdict.Restart = true
			d, err := time.ParseDuration(args["delay"])
			if err != nil {
				return nil, nil, fmt.Errorf("run-ended restart: delay: %w", err)
			}
			e.Verdict.Delay = d
		}
		return e, nil, nil
	}
	return nil, nil, fmt.Errorf("unknown event %q", f[0])
}

// describe is l in one line: the state, the reasons, the flags set.
func describe(l Life) string {
	s := "state=" + l.State.String()
	if l.Reason != "" {
		s += " reason=" + string(l.Reason)
	}
	if l.EndReason != "" {
		s += " end=" + string(l.EndReason)
	}
	if l.PendingKill != "" {
		s += " pending-kill=" + string(l.PendingKill)
	}
	for _, b := range []struct {
		on   bool
		name string
	}{{l.Service, "service"}, {l.Killing, "killing"}, {l.Escalated, "escalated"}, {l.CleanupKilled, "cleanup-killed"},
		{l.LeaderExited, "leader-exited"}, {l.GroupGone, "group-gone"}} {
		if b.on {
			s += " " + b.name
		}
	}
	return s
}

func effectName(e Effect) string {
	switch e := e.(type) {
	case Signal:
		return "signal " + string(e.Sig)
	case ArmGrace:
		return "arm-grace"
	case Escalate:
		return "escalate"
	case CountCleanupKill:
		return "count-cleanup-kill"
	case Journal:
		return "journal"
	case KillPending:
		return "kill-pending reason=" + string(e.Reason)
	case Finish:
		if e.ClearExit {
			return "finish clear-exit"
		}
		return "finish"
	case ScheduleRestart:
		return "schedule-restart delay=" + e.Delay.String()
	}
	return fmt.Sprintf("%T", e)
}

// The core stays pure: no I/O, clock, locks or logging (time is there for
// durations handed in).
func TestPureImports(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			switch strings.Trim(im.Path.Value, `"`) {
			case "os", "syscall", "sync", "sync/atomic", "log", "log/slog", "io", "net", "os/exec", "golang.org/x/sys/unix":
				t.Errorf("%s imports %s: the lifecycle core must stay pure", f, im.Path.Value)
			}
		}
	}
	b, err := os.ReadFile("step.go")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "time.Now") || strings.Contains(string(b), "time.Since") {
		t.Error("step.go reads the clock")
	}
}
