// Package wireerr maps the job engine's errors to wire errors: the one
// place where an engine error (internal/jobs: a sentinel kind under a
// message) becomes a protocol error code. The edges that speak the wire
// protocol, internal/server and pkg/local, call it; the engine knows no
// wire codes, and nothing else decides a code.
package wireerr

import (
	"errors"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/outlog"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// codes maps each engine error kind to its wire code.
var codes = []struct {
	kind error
	code protocol.Code
}{
	{jobs.ErrNotFound, protocol.CodeNotFound},
	{jobs.ErrTooManyJobs, protocol.CodeTooManyJobs},
	{jobs.ErrShuttingDown, protocol.CodeShuttingDown},
	{jobs.ErrSpawn, protocol.CodeSpawnError},
	{jobs.ErrJobRunning, protocol.CodeJobRunning},
	{jobs.ErrAlreadyExists, protocol.CodeAlreadyExists},
	{jobs.ErrNameTaken, protocol.CodeNameTaken},
	{jobs.ErrFinished, protocol.CodeInvalidArgument},
	{jobs.ErrNotRunning, protocol.CodeInvalidArgument},
	{jobs.ErrNoInput, protocol.CodeInvalidArgument},
	{jobs.ErrNoStdin, protocol.CodeInvalidArgument},
	{jobs.ErrInvalid, protocol.CodeInvalidArgument},
	{outlog.ErrNoOutput, protocol.CodeNotFound},
	{outlog.ErrCursor, protocol.CodeInvalidArgument},
}

// Of returns err as a wire error: a *protocol.Error in its chain as it is
// (a request the codec refused, an op's own argument check), an engine
// error under its kind's code and its message (one naming its job, a
// spawn error, an id or a name taken, with the job's id in Details["jobId"]), anything else as internal. The result
// wraps err (Unwrap), for logs and errors.Is on this side. nil gives nil.
func Of(err error) *protocol.Error {
	if err == nil {
		return nil
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	for _, c := range codes {
		if errors.Is(err, c.kind) {
			out := protocol.Wrap(c.code, err)
			var se *jobs.SpawnError
			var je *jobs.Error
			switch {
			case errors.As(err, &se):
				out.Details = map[string]string{"jobId": se.JobID}
			case errors.As(err, &je) && je.JobID != "":
				out.Details = map[string]string{"jobId": je.JobID}
			case errors.Is(err, jobs.ErrNoStdin):
				out.Details = map[string]string{"reason": "no-stdin"}
			}
			return out
		}
	}
	return protocol.Wrap(protocol.CodeInternal, err)
}
