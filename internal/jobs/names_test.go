package jobs

import (
	"context"
	"errors"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// TestJobNames: a name is held while its job runs (a second spawn of it is
// refused with ErrNameTaken naming the holder, and starts nothing), is
// free once the job finished, and resolves to the live job, else to the
// one that finished last; removing jobs drops them from the index.
func TestJobNames(t *testing.T) {
	m := New(Config{MaxJobs: 10}, nil, nil)
	defer m.Close(context.Background())
	a, info, err := m.SpawnJob(protocol.SpawnArgs{Name: "build", Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "build" || m.Resolve("build") != a.ID() || m.Resolve(a.ID()) != a.ID() {
		t.Fatalf("name %q; build resolves to %q, want %s", info.Name, m.Resolve("build"), a.ID())
	}
	_, total := m.Counts()
	_, _, err = m.SpawnJob(protocol.SpawnArgs{Name: "build", Argv: []string{"true"}})
	var je *Error
	if !errors.Is(err, ErrNameTaken) || !errors.As(err, &je) || je.JobID != a.ID() {
		t.Fatalf("second spawn of name build: %v, want ErrNameTaken naming %s", err, a.ID())
	}
	if _, n := m.Counts(); n != total {
		t.Fatalf("a refused spawn made a job: %d -> %d", total, n)
	}
	// A chosen id equal to a held name is refused too; so is a name that
	// is a known job's id (the id would always win).
	if _, _, err := m.SpawnJob(protocol.SpawnArgs{JobID: "build", Argv: []string{"true"}}); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("chosen id build while the name is held: %v, want ErrNameTaken", err)
	}
	c, _, err := m.SpawnJob(protocol.SpawnArgs{JobID: "deploy", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if _, _, err := m.SpawnJob(protocol.SpawnArgs{Name: "deploy", Argv: []string{"true"}}); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("name deploy, the id of a known job: %v, want ErrNameTaken", err)
	}
	if _, _, err := m.SpawnJob(protocol.SpawnArgs{Name: "j-1234", Argv: []string{"true"}}); protocol.CodeOf(err) != protocol.CodeInvalidArgument {
		t.Fatalf("name j-1234: %v, want invalid-argument", err)
	}

	if _, err := a.Kill(protocol.ReasonManualCancel, SigKill); err != nil {
		t.Fatal(err)
	}
	<-a.Done()
	if m.Resolve("build") != a.ID() {
		t.Fatalf("after its end build resolves to %q, want the finished %s", m.Resolve("build"), a.ID())
	}
	b, _, err := m.SpawnJob(protocol.SpawnArgs{Name: "build", Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatalf("name build once its job finished: %v", err)
	}
	if m.Resolve("build") != b.ID() {
		t.Fatalf("build resolves to %q, want the live %s", m.Resolve("build"), b.ID())
	}
	if _, err := b.Kill(protocol.ReasonManualCancel, SigKill); err != nil {
		t.Fatal(err)
	}
	<-b.Done()
	if m.Resolve("build") != b.ID() {
		t.Fatalf("build resolves to %q, want %s, which finished last", m.Resolve("build"), b.ID())
	}
	if err := m.Remove(b.ID()); err != nil {
		t.Fatal(err)
	}
	if m.Resolve("build") != a.ID() {
		t.Fatalf("with %s removed build resolves to %q, want %s", b.ID(), m.Resolve("build"), a.ID())
	}
	if err := m.Remove(a.ID()); err != nil {
		t.Fatal(err)
	}
	if got := m.Resolve("build"); got != "build" {
		t.Fatalf("no job named build: resolves to %q", got)
	}
	m.mu.Lock()
	left := len(m.names)
	m.mu.Unlock()
	if left != 0 {
		t.Fatalf("the name index keeps %d names of forgotten jobs", left)
	}
}

// TestServiceKeepsName: a service holds its name across its runs and
// while it waits to restart; once stopped it lets it go, and starting it
// again takes it back, unless another job took it meanwhile.
func TestServiceKeepsName(t *testing.T) {
	m := New(Config{MaxJobs: 10}, nil, nil)
	defer m.Close(context.Background())
	svc, _, err := m.SpawnJob(protocol.SpawnArgs{Name: "web", Argv: []string{"sleep", "30"},
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Restart("web"); err == nil {
		t.Fatal("Restart by name in the engine: names are resolved by the edges (Resolve), not by every method")
	}
	if _, err := m.Restart(m.Resolve("web")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.SpawnJob(protocol.SpawnArgs{Name: "web", Argv: []string{"true"}}); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("name web while its service is supervised: %v", err)
	}
	if _, err := m.Stop(svc.ID()); err != nil {
		t.Fatal(err)
	}
	<-svc.Done()
	other, _, err := m.SpawnJob(protocol.SpawnArgs{Name: "web", Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatalf("name web once its service stopped: %v", err)
	}
	if _, err := m.Start(svc.ID()); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("start of the service while %s holds its name: %v, want ErrNameTaken", other.ID(), err)
	}
	if _, err := other.Kill(protocol.ReasonManualCancel, SigKill); err != nil {
		t.Fatal(err)
	}
	<-other.Done()
	if info, err := m.Start(svc.ID()); err != nil || info.Name != "web" {
		t.Fatalf("start of the service once the name is free: %v (name %q)", err, info.Name)
	}
	if m.Resolve("web") != svc.ID() {
		t.Fatalf("web resolves to %q, want the service %s", m.Resolve("web"), svc.ID())
	}
}
