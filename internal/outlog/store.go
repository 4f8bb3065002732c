// Package outlog keeps jobs' output on disk: for each job a directory of
// size-capped segment files under one root, holding the job's combined
// output (stdout and stderr in the order produced, at the offsets poll
// uses) as checked frames, read back by offset for poll after the output
// left the in-memory ring, the job left memory, or the supervisor
// restarted.
//
// Writes never block the caller: a Writer queues frames and one
// goroutine of its own (started on demand, owned by the Store) appends
// them, with one writev(2) per batch straight from the output's own
// buffers (the engine never changes an event's data once made). A write that fails (a full disk) ends the job's disk output for
// good (memory only from then on), reported through Config.OnError.
//
// The root is a 0700 directory of ours; a job's directory is named by
// its id, which must be a valid chosen id (protocol.ValidJobIDChoice:
// no "/", never "." or ".."), so that no id names a path outside it.
// Files are 0600, opened without following symlinks, and made
// exclusively. It does not decide which jobs write to disk (the engine
// does), nor know wire error codes (internal/wireerr maps its errors).
package outlog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Config configures a Store. Zero values take the defaults of
// DefaultConfig (MaxAge: 0 never sweeps).
type Config struct {
	// Dir is the root directory (created 0700 if missing; its parent
	// must exist).
	Dir string
	// SegmentBytes is the size at which a job's current segment is closed
	// and a new one started.
	SegmentBytes int64
	// MaxBytes bounds a job's segments together: the oldest are deleted
	// to keep under it (at least 2 x SegmentBytes).
	MaxBytes int64
	// MaxAge removes the files of a job that is not in memory (forgotten
	// by retention, or left by an earlier supervisor run) once nothing
	// was written to them for this long; 0 never.
	MaxAge time.Duration
	// SweepInterval is the period of the age sweep; 0: MaxAge/8, between
	// 10 ms and 10 min.
	SweepInterval time.Duration
	// StallLimit is how long a job's queued output may stay over its
	// high-water mark (the disk does not keep up, or a write hangs)
	// before its disk output is given up; 0: 10 s.
	StallLimit time.Duration
	// OnError is told when a job's disk output fails (it is memory only
	// from then on); OnBytes of every byte written. Nil: not told. Called
	// without locks, from any goroutine.
	OnError func(jobID string, err error)
	OnBytes func(n int)
	// Now replaces time.Now (the age sweep).
	Now func() time.Time
}

// DefaultConfig returns the documented defaults (Dir aside).
func DefaultConfig() Config {
	return Config{SegmentBytes: 8 << 20, MaxBytes: 64 << 20, MaxAge: 7 * 24 * time.Hour}
}

// Errors of the Store.
var (
	// ErrNoOutput: no output of that job on disk.
	ErrNoOutput = errors.New("no output of that job on disk")
	// ErrCursor: a cursor past the end of the output on disk.
	ErrCursor = errors.New("cursor past the end of the output")
	// ErrStalled: the disk did not keep up with a job's output.
	ErrStalled = errors.New("disk writes stalled")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("output store closed")
)

// Store is the root of the jobs' output directories.
type Store struct {
	cfg Config

	mu      sync.Mutex
	open    map[string]*Writer // jobs in memory: never swept
	closing bool
	wg      sync.WaitGroup // writers' goroutines and the sweeper
	stop    chan struct{}
	swept   bool
	// goMu guards stopped, the closing that writers' goroutines see
	// (goWrite): a job's output path takes it, never mu, which is held
	// across the sweep's directory I/O.
	goMu    sync.Mutex
	stopped bool
	// dirHook, when set (tests), is called by a writer's goroutine
	// before it makes the job's directory, without the writer's lock.
	dirHook func(id string)
}

// Open makes (or checks) the root directory and returns its Store.
func Open(cfg Config) (*Store, error) {
	d := DefaultConfig()
	if cfg.SegmentBytes <= 0 {
		cfg.SegmentBytes = d.SegmentBytes
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = d.MaxBytes
	}
	if cfg.MaxBytes < 2*cfg.SegmentBytes {
		return nil, fmt.Errorf("output max bytes %d: must be at least twice the segment size %d", cfg.MaxBytes, cfg.SegmentBytes)
	}
	if cfg.StallLimit <= 0 {
		cfg.StallLimit = 10 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = min(max(cfg.MaxAge/8, 10*time.Millisecond), 10*time.Minute)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Dir == "" {
		return nil, errors.New("output directory: empty path")
	}
	if err := os.Mkdir(cfg.Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("output directory: create %s: %w", cfg.Dir, err)
	}
	if err := checkPrivateDir(cfg.Dir); err != nil {
		return nil, fmt.Errorf("output directory: %w", err)
	}
	return &Store{cfg: cfg, open: map[string]*Writer{}, stop: make(chan struct{})}, nil
}

// checkPrivateDir checks that dir is a directory (not a symlink) of ours
// that nobody else may enter.
func checkPrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (or is a symlink): refusing to use it", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by us (uid %d): refusing to use it", dir, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s has mode %o: jobs' output must be ours alone (chmod 0700 %s)", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// Dir is the root directory.
func (s *Store) Dir() string { return s.cfg.Dir }

// jobDir returns the directory of job id, or an error for an id that is
// not a safe path component.
func (s *Store) jobDir(id string) (string, error) {
	if err := protocol.ValidJobIDChoice(id); err != nil {
		return "", fmt.Errorf("job id %.64q cannot name an output directory: %w", id, err)
	}
	return filepath.Join(s.cfg.Dir, id), nil
}

// StartSweeper starts the age sweep (nothing when MaxAge is 0). Close
// stops it.
func (s *Store) StartSweeper() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.MaxAge <= 0 || s.swept || s.closing {
		return
	}
	s.swept = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(s.cfg.SweepInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.Sweep()
			}
		}
	}()
}

// Sweep removes the directories of jobs not in memory whose newest file
// was last written more than MaxAge ago, and returns how many.
// Directories whose name is not a job id are left alone.
func (s *Store) Sweep() int {
	if s.cfg.MaxAge <= 0 {
		return 0
	}
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return 0
	}
	cutoff := s.cfg.Now().Add(-s.cfg.MaxAge)
	n := 0
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || protocol.ValidJobIDChoice(id) != nil {
			continue
		}
		dir := filepath.Join(s.cfg.Dir, id)
		if newest(dir).After(cutoff) {
			continue
		}
		s.mu.Lock()
		if s.open[id] == nil && !s.closing {
			if os.RemoveAll(dir) == nil {
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// newest returns when a file in dir (or dir) was last modified.
func newest(dir string) time.Time {
	fi, err := os.Lstat(dir)
	if err != nil {
		return time.Time{}
	}
	t := fi.ModTime()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if i, err := e.Info(); err == nil && i.ModTime().After(t) {
			t = i.ModTime()
		}
	}
	return t
}

// Has reports whether job id has a directory (output or its record).
func (s *Store) Has(id string) bool {
	dir, err := s.jobDir(id)
	if err != nil {
		return false
	}
	fi, err := os.Lstat(dir)
	return err == nil && fi.IsDir()
}

// Remove deletes job id's files (a job not in memory: one in memory is
// removed through its Writer). ErrNoOutput when there are none.
func (s *Store) Remove(id string) error {
	dir, err := s.jobDir(id)
	if err != nil {
		return fmt.Errorf("remove output of %.64q: %w", id, ErrNoOutput)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.open[id]; w != nil {
		return fmt.Errorf("remove output of %s: the job is in memory: remove it", id)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("remove output of %s: %w", id, ErrNoOutput)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove output of %s: %w", id, err)
	}
	return nil
}

// Close stops the sweeper and waits (at most until ctx ends) for the
// writers to write what they have queued. Writes asked for later are
// dropped. Idempotent.
func (s *Store) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.stop)
	}
	s.mu.Unlock()
	s.goMu.Lock()
	s.stopped = true
	s.goMu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close output store: writes still under way: %w", ctx.Err())
	}
}

// goWrite starts a writer's goroutine unless the store is closed (the
// writer's lock is held).
func (s *Store) goWrite(f func()) bool {
	s.goMu.Lock()
	defer s.goMu.Unlock()
	if s.stopped {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// NoteError reports a failure of job id's disk output (Config.OnError).
func (s *Store) NoteError(id string, err error) {
	if s.cfg.OnError != nil {
		s.cfg.OnError(id, err)
	}
}

func (s *Store) noteBytes(n int) {
	if s.cfg.OnBytes != nil && n > 0 {
		s.cfg.OnBytes(n)
	}
}
