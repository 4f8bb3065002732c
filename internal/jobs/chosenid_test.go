package jobs

import (
	"context"
	"errors"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestChosenJobID: a spawn may name its job; a known id (running, or
// finished and retained) is refused with already-exists and starts
// nothing; once the job is removed the id is free again.
func TestChosenJobID(t *testing.T) {
	m := New(Config{MaxJobs: 10}, nil, nil)
	defer m.Close(context.Background())
	j, info, err := m.SpawnJob(protocol.SpawnArgs{JobID: "build-42", Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.JobID != "build-42" || j.ID() != "build-42" {
		t.Fatalf("job id %q (%q), want build-42", info.JobID, j.ID())
	}
	if j.spec.JobID != "" {
		t.Fatalf("the id is kept in the job's spec too: %q", j.spec.JobID)
	}
	refused := func(when string) {
		t.Helper()
		active, total := m.Counts()
		_, _, err := m.SpawnJob(protocol.SpawnArgs{JobID: "build-42", Argv: []string{"true"}})
		var je *Error
		if !errors.Is(err, ErrAlreadyExists) || !errors.As(err, &je) || je.JobID != "build-42" {
			t.Fatalf("%s: second spawn of build-42: %v, want ErrAlreadyExists naming the job", when, err)
		}
		if a, n := m.Counts(); a != active || n != total {
			t.Fatalf("%s: a refused spawn changed the counts: %d/%d -> %d/%d", when, active, total, a, n)
		}
	}
	refused("running")
	if _, err := j.Kill(protocol.ReasonManualCancel, SigKill); err != nil {
		t.Fatal(err)
	}
	<-j.Done()
	refused("finished")
	if got, _ := m.Get("build-42"); got != j || got.Info().Reason != protocol.ReasonManualCancel {
		t.Fatal("the refused spawn touched the known job")
	}
	if err := m.Remove("build-42"); err != nil {
		t.Fatal(err)
	}
	j2, _, err := m.SpawnJob(protocol.SpawnArgs{JobID: "build-42", Argv: []string{"true"}})
	if err != nil {
		t.Fatalf("spawn after remove: %v", err)
	}
	<-j2.Done()
	if _, _, err := m.SpawnJob(protocol.SpawnArgs{JobID: "-x", Argv: []string{"true"}}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("a bad id: %v, want invalid-argument", err)
	}
}
