package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/outlog"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Jobs' output on disk (internal/outlog): the store is opened at start,
// given to the engine, and serves polls and removes of jobs no longer in
// memory (forgotten by retention, or finished before a restart and not
// in the journal any more).

// openOutlog opens the store of jobs' output on disk.
func (s *Server) openOutlog() (*outlog.Store, error) {
	return outlog.Open(outlog.Config{
		Dir: s.cfg.OutputPath(), SegmentBytes: s.cfg.OutputSegmentBytes, MaxBytes: s.cfg.OutputMaxBytes,
		MaxAge: s.cfg.OutputMaxAge, SweepInterval: s.cfg.OutputSweepInterval, StallLimit: s.cfg.OutputStallLimit,
		OnError: s.outputDiskError,
		OnBytes: func(n int) { s.metrics.OutputDiskBytes.Add(float64(n)) },
	})
}

// diskErrLog rate-limits the log lines of disk output failures: a full
// disk fails every job writing to it at once.
type diskErrLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// outputDiskError counts a job's failed disk output and logs it (at
// most one line per 10 s, counting the ones left out).
func (s *Server) outputDiskError(jobID string, err error) {
	s.metrics.OutputDiskErrors.Inc()
	l := &s.diskErrs
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.last) < 10*time.Second {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.last = now
	n := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	s.log.Warn("job output on disk given up: the job goes on with its output in memory only (ring buffer)",
		"job", jobID, "err", err, "dir", s.cfg.OutputPath(), "othersSinceLastLogged", n)
}

// diskJob returns the id of the job not in memory, with files, that ref
// names: its id, or else its name (of the jobs on disk with that name,
// the one that ended last: outlog.Store.Named).
func (s *Server) diskJob(ref string) (string, bool) {
	if s.out.Has(ref) {
		return ref, true
	}
	return s.out.Named(ref)
}

// pollFromDisk answers a poll of a job not in memory from its files (the
// original not-found stands when it has none). The job is named by its
// id, or else by its name (diskJob).
func (s *Server) pollFromDisk(a *protocol.PollArgs, notFound error) (any, error) {
	if s.out == nil || !errors.Is(notFound, jobs.ErrNotFound) {
		return nil, notFound
	}
	id, ok := s.diskJob(a.JobID)
	if !ok {
		return nil, notFound
	}
	res, err := s.out.Poll(id, a.Cursor, a.MaxBytes)
	if errors.Is(err, outlog.ErrNoOutput) {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	res.InstanceID = s.instanceID
	res.Job.Error = strings.ToValidUTF8(res.Job.Error, "\uFFFD")
	return res, nil
}

// subscribeFromDisk answers a subscribe of a job not in memory from its
// files (jobs.Manager.DiskEvents; the original not-found stands when it
// has none), named as for poll (diskJob).
func (s *Server) subscribeFromDisk(a *protocol.SubscribeArgs, notFound error) (protocol.SubscribeResult, error) {
	if s.out == nil || !errors.Is(notFound, jobs.ErrNotFound) {
		return protocol.SubscribeResult{}, notFound
	}
	id, ok := s.diskJob(a.JobID)
	if !ok {
		return protocol.SubscribeResult{}, notFound
	}
	res, err := s.jobs.DiskEvents(id, a.FromSeq, a.Limit)
	if errors.Is(err, jobs.ErrNotFound) {
		return protocol.SubscribeResult{}, notFound
	}
	if err != nil {
		return protocol.SubscribeResult{}, err
	}
	res.Job.Error = strings.ToValidUTF8(res.Job.Error, "\uFFFD")
	return res, nil
}

// removeFromDisk deletes the files of a job not in memory (remove of a
// job forgotten by retention) and returns its id. ref names it by its
// id, or else by its name when one job on disk has that name: removal
// cannot be undone and a forgotten job has no status to check it by, so
// a name several such jobs have is refused with their ids (newest
// first), not taken as the newest's as poll takes it.
func (s *Server) removeFromDisk(ref string, notFound error) (string, error) {
	if s.out == nil || !errors.Is(notFound, jobs.ErrNotFound) {
		return "", notFound
	}
	id := ref
	if !s.out.Has(ref) {
		ids := s.out.NamedAll(ref)
		switch len(ids) {
		case 0:
			return "", notFound
		case 1:
			id = ids[0]
		default:
			return "", ambiguousName(ref, ids)
		}
	}
	if err := s.out.Remove(id); errors.Is(err, outlog.ErrNoOutput) {
		return "", notFound
	} else if err != nil {
		return "", err
	}
	return id, nil
}

// maxNamedIDs bounds the ids an ambiguous name's error lists.
const maxNamedIDs = 20

// ambiguousName is the error of a remove whose name several jobs on disk
// have (ids: theirs, newest first): invalid-argument, their ids in the
// message and in details (reason ambiguous-name, jobIds space-separated;
// at most maxNamedIDs of them, the newest).
func ambiguousName(name string, ids []string) error {
	shown := ids[:min(len(ids), maxNamedIDs)]
	list := strings.Join(shown, " ")
	more := ""
	if len(ids) > len(shown) {
		more = fmt.Sprintf(" and %d older", len(ids)-len(shown))
	}
	e := protocol.Errorf(protocol.CodeInvalidArgument,
		"%d jobs no longer in memory are named %q (newest first: %s%s): remove one by its id", len(ids), name, list, more)
	e.Details = map[string]string{"reason": "ambiguous-name", "jobIds": list}
	return e
}

// closeOutlog waits (bounded by ctx) for the last output to be written.
func (s *Server) closeOutlog(ctx context.Context) {
	if s.out == nil {
		return
	}
	if err := s.out.Close(ctx); err != nil {
		s.log.Warn("jobs' output not all written to disk at shutdown", "err", err)
	}
}
