package main

import (
	"strings"
	"testing"
)

// TestSpawnChosenID: spawn --id names the job; the same id again is
// refused (already-exists, with a hint) and starts nothing; an id that
// looks like an abbreviation of generated ids is taken whole when a job
// has it.
func TestSpawnChosenID(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	if id := s.spawnID(t, "--id", "beef", "--shell", "echo chosen"); id != "beef" {
		t.Fatalf("spawn --id beef printed %q", id)
	}
	s.waitExited(t, "beef")
	if out := s.mustCtl(t, "poll", "beef"); out != "chosen\n" {
		t.Fatalf("poll beef: %q", out)
	}
	code, _, errs := s.ctl(t, "spawn", "--id", "beef", "--", "true")
	if code != exitFailed || !strings.Contains(errs, "already-exists") || !strings.Contains(errs, "execctl remove") {
		t.Fatalf("second spawn --id beef: exit %d stderr %q", code, errs)
	}
	code, _, errs = s.ctl(t, "spawn", "--id", "a/b", "--", "true")
	if code != exitFailed || !strings.Contains(errs, "invalid-argument") {
		t.Fatalf("spawn --id a/b: exit %d stderr %q", code, errs)
	}
	if out := s.mustCtl(t, "list"); strings.Count(out, "beef") != 1 {
		t.Fatalf("list shows beef %d times:\n%s", strings.Count(out, "beef"), out)
	}
}
