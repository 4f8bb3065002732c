package wireerr_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/wireerr"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Every engine error kind has its code; a spawn error names its job; a
// wire error passes as it is; anything else is internal; what was mapped
// stays reachable with errors.Is/As on this side.
func TestOf(t *testing.T) {
	cause := errors.New("exec: no such file")
	for _, c := range []struct {
		err  error
		code protocol.Code
	}{
		{&jobs.Error{Kind: jobs.ErrNotFound, Msg: "no job"}, protocol.CodeNotFound},
		{&jobs.Error{Kind: jobs.ErrTooManyJobs, Msg: "50 running"}, protocol.CodeTooManyJobs},
		{&jobs.Error{Kind: jobs.ErrShuttingDown, Msg: "closing"}, protocol.CodeShuttingDown},
		{&jobs.SpawnError{JobID: "j-1", Err: cause}, protocol.CodeSpawnError},
		{&jobs.Error{Kind: jobs.ErrJobRunning, Msg: "running"}, protocol.CodeJobRunning},
		{&jobs.Error{Kind: jobs.ErrAlreadyExists, Msg: "taken", JobID: "build-1"}, protocol.CodeAlreadyExists},
		{&jobs.Error{Kind: jobs.ErrNameTaken, Msg: "held", JobID: "j-2"}, protocol.CodeNameTaken},
		{&jobs.Error{Kind: jobs.ErrFinished, Msg: "exited"}, protocol.CodeInvalidArgument},
		{&jobs.Error{Kind: jobs.ErrNotRunning, Msg: "between runs"}, protocol.CodeInvalidArgument},
		{&jobs.Error{Kind: jobs.ErrNoInput, Msg: "stdin closed"}, protocol.CodeInvalidArgument},
		{&jobs.Error{Kind: jobs.ErrNoStdin, Msg: "no stdin"}, protocol.CodeInvalidArgument},
		{&jobs.Error{Kind: jobs.ErrInvalid, Msg: "bad cursor"}, protocol.CodeInvalidArgument},
		{fmt.Errorf("handle: %w", &jobs.Error{Kind: jobs.ErrNotFound, Msg: "no job"}), protocol.CodeNotFound},
		{protocol.Errorf(protocol.CodeBadRequest, "no"), protocol.CodeBadRequest},
		{errors.New("disk on fire"), protocol.CodeInternal},
	} {
		pe := wireerr.Of(c.err)
		if pe.Code != c.code || pe.Message == "" {
			t.Errorf("%v: %s %q; want code %s", c.err, pe.Code, pe.Message, c.code)
		}
		if !errors.Is(pe, c.err) && pe != c.err {
			t.Errorf("%v: the wire error does not wrap it", c.err)
		}
	}
	pe := wireerr.Of(&jobs.SpawnError{JobID: "j-1", Err: cause})
	if pe.Details["jobId"] != "j-1" || pe.Message != cause.Error() || !errors.Is(pe, cause) || !errors.Is(pe, jobs.ErrSpawn) {
		t.Errorf("spawn error: %+v", pe)
	}
	if !errors.Is(pe, protocol.ErrSpawnError) || errors.Is(pe, protocol.ErrNotFound) {
		t.Error("errors.Is by code does not hold")
	}
	if pe := wireerr.Of(&jobs.Error{Kind: jobs.ErrAlreadyExists, Msg: "taken", JobID: "build-1"}); pe.Details["jobId"] != "build-1" {
		t.Errorf("already-exists: %+v", pe)
	}
	if pe := wireerr.Of(&jobs.Error{Kind: jobs.ErrNameTaken, Msg: "held", JobID: "j-2"}); pe.Details["jobId"] != "j-2" || !errors.Is(pe, protocol.ErrNameTaken) {
		t.Errorf("name-taken: %+v", pe)
	}
	if pe := wireerr.Of(&jobs.Error{Kind: jobs.ErrNoStdin, Msg: "no stdin"}); pe.Details["reason"] != "no-stdin" {
		t.Errorf("no stdin: %+v", pe)
	}
	if wireerr.Of(nil) != nil {
		t.Error("nil mapped to an error")
	}
}

// The engine knows no wire codes: only the edges map its errors.
func TestEngineHasNoWireCodes(t *testing.T) {
	files, err := filepath.Glob("../jobs/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("engine sources: %v", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"protocol.Errorf", "protocol.Code", "protocol.Error{"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("%s uses %s: return an engine error (errors.go) and let wireerr map it", f, bad)
			}
		}
	}
}
