package jobs

import (
	"errors"
	"fmt"
)

// The kinds of error the engine returns. Every error of the Manager's and
// a Job's methods wraps exactly one of them (errors.Is) under a message for
// people; the edges that speak the wire protocol (internal/server,
// pkg/local) map them to wire error codes in one place
// (internal/wireerr). The engine itself knows no wire codes.
var (
	// ErrNotFound: no job of that id is known (never was, removed, or
	// forgotten after the retention period).
	ErrNotFound = errors.New("no such job")
	// ErrTooManyJobs: --max-jobs are running.
	ErrTooManyJobs = errors.New("too many jobs running")
	// ErrShuttingDown: the Manager is closing and starts nothing.
	ErrShuttingDown = errors.New("shutting down")
	// ErrSpawn: the job's process could not be started (a *SpawnError).
	ErrSpawn = errors.New("could not start the job")
	// ErrJobRunning: the operation needs the job (or its run) to have
	// ended, or it is starting or stopping.
	ErrJobRunning = errors.New("job is running")
	// ErrFinished: the job has ended; there is nothing to signal or feed.
	ErrFinished = errors.New("job has finished")
	// ErrNotRunning: the job has no process right now (a service between
	// runs, a run starting).
	ErrNotRunning = errors.New("job has no running process")
	// ErrNoInput: the job takes no input now (stdin closed, no
	// terminal), or stopped reading it.
	ErrNoInput = errors.New("job takes no input")
	// ErrNoStdin: the job was spawned without a stdin pipe or a terminal:
	// it never takes input.
	ErrNoStdin = errors.New("job has no stdin")
	// ErrAlreadyExists: a job of the id a spawn chose is known already
	// (its JobID names it).
	ErrAlreadyExists = errors.New("job already exists")
	// ErrNameTaken: a job not finished holds the name a spawn (or the
	// start of a finished service) gave (its JobID names it).
	ErrNameTaken = errors.New("job name taken")
	// ErrInvalid: an argument the engine cannot act on (a cursor past the
	// output, a negative offset, a job that is not a service...).
	ErrInvalid = errors.New("invalid argument")
)

// Error is an engine error: a message for people, the kind it is (one of
// the Err sentinels) and what caused it, if anything.
type Error struct {
	Kind  error
	Msg   string
	Cause error
	// JobID names the job the error is about, where the caller may not
	// know it (a spawn's): "" otherwise.
	JobID string
}

func (e *Error) Error() string { return e.Msg }

// Unwrap gives the kind and the cause to errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Kind, e.Cause}
	}
	return []error{e.Kind}
}

// errorf returns an *Error of kind with a formatted message.
func errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// SpawnError says job JobID was made but its process could not be
// started; it wraps ErrSpawn and the cause.
type SpawnError struct {
	JobID string
	Err   error
}

func (e *SpawnError) Error() string { return e.Err.Error() }

// Unwrap gives ErrSpawn and the cause to errors.Is and errors.As.
func (e *SpawnError) Unwrap() []error { return []error{ErrSpawn, e.Err} }
