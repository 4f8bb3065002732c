// Package server wires the ZeroMQ control and event sockets to the job
// manager: it decodes requests, runs ops, encodes replies, publishes
// events with a bounded queue and heartbeats, and shuts down in order.
//
// It does not implement job semantics (internal/jobs) or the wire format
// (pkg/protocol); it only connects them.
package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/outlog"

	"github.com/exec-supervisor/exec-supervisor/internal/buildinfo"
	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/cpuhome"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/metrics"
	"github.com/exec-supervisor/exec-supervisor/internal/openclaw"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Version is the supervisor's software version, reported by health.
const Version = buildinfo.Version

// Server is a running supervisor. Lifecycle: New -> Start -> Close.
type Server struct {
	cfg        Config
	log        *slog.Logger
	instanceID string
	startedAt  time.Time

	token string // tcp password; empty when no tcp endpoint or insecure
	// curve is tcp's CURVE side (--curve), nil without.
	curve *zmtp.CurveServer
	// cgroupBase is where job cgroups go (nil: none); cgroupNote says why not.
	cgroupBase *cgroups.Base
	cgroupNote string
	// out keeps jobs' output on disk (outlog.go); diskErrs rate-limits
	// the log lines of its failures.
	out      *outlog.Store
	diskErrs diskErrLog
	// cpu keeps this process's threads on one CPU while it is quiet.
	cpu *cpuhome.Home
	// mark is the state directory's mark, in every job's environment
	// (loadStateMark): how a restart finds what an earlier run left running.
	mark string
	// sweepLeft: the start's sweep (sweepMarked) could not end, or look
	// for, everything an earlier run left: this run's stop is not clean.
	sweepLeft bool
	jobs      *jobs.Manager
	pub       *publisher
	metrics   *metrics.Metrics
	// dialect answers control requests of OpenClaw's JSON dialect;
	// dialectEvents publishes its events, to the subscribers of
	// dialectScope (the event socket's count of exec: subscriptions).
	dialect       *openclaw.Handler
	dialectEvents *openclaw.Events
	dialectScope  atomic.Pointer[zmtp.Scope]
	// started counts the jobs (and service runs) started since the
	// supervisor started (the dialect's health totalJobsProcessed).
	started atomic.Uint64

	ctx    context.Context // cancelled by Close: ends the sockets
	cancel context.CancelFunc
	ctl    *zmtp.Router
	evt    *zmtp.Publisher
	httpL  net.Listener
	httpS  *http.Server

	inflight chan struct{}
	// evtMu guards evt, which RestartEventSocket replaces.
	evtMu sync.RWMutex
	// work hands requests to idle workers (unbuffered: only a waiting
	// worker takes one).
	work     chan func()
	draining chan struct{}
	stopPub  chan struct{}

	// jw writes the journal and its intents (journalwriter.go).
	jw   *journalWriter
	lock *journal.Lock
	// Counters for metrics and health.
	orphansReconciled atomic.Uint64

	wg    sync.WaitGroup // control loops, heartbeat
	pubWG sync.WaitGroup // publisher
	reqWG sync.WaitGroup // request handlers and held replies
	held  heldCounts     // replies held for waits (wait.go)
	reqMu sync.Mutex     // guards reqStopped and reqWG.Add
	// reqStopped: Close is waiting for handlers; new requests get shutting-down.
	reqStopped bool
	closeMu    sync.Mutex
	closed     bool
}

// New validates cfg and builds a server; nothing listens until Start.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := &Server{
		cfg: cfg, log: log, instanceID: hex.EncodeToString(b[:]), startedAt: time.Now(),
		inflight: make(chan struct{}, cfg.MaxInFlight),
		work:     make(chan func()),
		draining: make(chan struct{}), stopPub: make(chan struct{}),
	}
	s.jw = newJournalWriter(journal.New(cfg.JournalPath()), &s.cfg, log, s.instanceID)
	s.dialectEvents = openclaw.NewEvents()
	s.dialect = openclaw.NewHandler(openclaw.Config{
		MaxRequestBytes:   cfg.MaxRequestBytes,
		EventsDropped:     func() uint64 { return s.pub.dropped.Load() }, // (s.pub: made by Start, before requests)
		SyncSubscriptions: s.syncSubscriptions,
		JobsStarted:       s.started.Load,
		Log:               log,
	})
	return s, nil
}

// countFinished counts a job's end (and a timeout, if that was it).
func (s *Server) countFinished(r protocol.Reason, service bool) {
	s.metrics.Finished.WithLabelValues(string(r)).Inc()
	if !service { // (a service's runs are counted as they end: countTimeout)
		s.countTimeout(r)
	}
}

// countTimeout counts a run (a one-shot job, or one run of a service)
// that a timeout ended.
func (s *Server) countTimeout(r protocol.Reason) {
	switch r {
	case protocol.ReasonOverallTimeout:
		s.metrics.Timeouts.WithLabelValues("overall").Inc()
	case protocol.ReasonNoOutputTimeout:
		s.metrics.Timeouts.WithLabelValues("no_output").Inc()
	}
}

// checkJournalPath refuses a journal path that names something else: a
// file of the state directory the supervisor keeps for another purpose,
// or, given with --journal, an existing non-regular file (a directory, a
// socket, a symlink: an unreadable journal is moved aside, and that could
// be anything of anyone's, /etc).
func checkJournalPath(cfg Config) error {
	path := cfg.JournalPath()
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		if r, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
			p = filepath.Join(r, filepath.Base(p))
		}
		return p
	}
	jp := abs(path)
	sd := abs(filepath.Join(cfg.StateDir, "x"))
	sd = filepath.Dir(sd)
	for _, other := range []string{sd, filepath.Join(sd, "lock"), filepath.Join(sd, "token"), filepath.Join(sd, "notify"), abs(cfg.TokenPath())} {
		if jp == other {
			return fmt.Errorf("--journal %s is the supervisor's own %s: give the journal a file of its own (or leave --journal out for <state-dir>/journal.json)", path, other)
		}
	}
	if cfg.Journal == "" {
		return nil // (<state-dir>/journal.json: anything there is ours, moved aside if unreadable)
	}
	// In a directory others may write to (sticky, /tmp), what is at the
	// journal's paths may be anyone's: only a regular file of ours is
	// read, replaced or moved aside.
	for _, p := range []string{path, journal.IntentsPath(path)} {
		if err := checkOwnFile(p); err != nil {
			return fmt.Errorf("--journal %s: %w", path, err)
		}
	}
	return nil
}

// checkOwnFile refuses what is at path unless it is missing (the first
// write creates it) or a regular file of ours.
func checkOwnFile(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a regular file (%s): refusing to move it aside or replace it", path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by us (uid %d): another user's file (where others can make files, as in /tmp, give each supervisor a journal path of its own); refusing to read, move aside or replace it", path, st.Uid, os.Geteuid())
	}
	return nil
}

// InstanceID identifies this run of the supervisor; it changes on restart.
func (s *Server) InstanceID() string { return s.instanceID }

func (s *Server) newMetrics() *metrics.Metrics {
	f := func(v func() uint64) func() float64 { return func() float64 { return float64(v()) } }
	return metrics.New(metrics.Gauges{
		ActiveJobs:        func() float64 { a, _ := s.jobs.Counts(); return float64(a) },
		KnownJobs:         func() float64 { _, t := s.jobs.Counts(); return float64(t) },
		RingBytes:         func() float64 { return float64(s.jobs.RetainedBytes()) },
		QueueLength:       func() float64 { return float64(s.pub.queued()) },
		EventsDropped:     f(s.pub.dropped.Load),
		GapEvents:         f(s.pub.gapEvents.Load),
		JournalWrites:     f(s.jw.journal.Writes.Load),
		JournalFailures:   f(s.jw.journal.Failures.Load),
		JournalCorrupt:    f(s.jw.corrupt.Load),
		IntentFailures:    s.intentFailures,
		OrphansReconciled: f(s.orphansReconciled.Load),
		OrphansReaped:     func() float64 { return float64(s.jobs.Reaped()) },
		OrphansEnded:      func() float64 { return float64(s.jobs.OrphansEnded()) },
		JobsForgotten:     func() float64 { return float64(s.jobs.Forgotten()) },
		FinishedBytes:     func() float64 { _, b := s.jobs.FinishedRetained(); return float64(b) },
		Subscribers:       func() float64 { return float64(s.EventSubscribers()) },
		HeldWaits:         func() float64 { return float64(s.heldWaits()) },
		PacedJobs:         func() float64 { return float64(s.jobs.Paced()) },
		QueuedJobs:        func() float64 { return float64(s.jobs.Queued()) },
		CPUHome:           func() float64 { return float64(s.cpu.Current()) },
		CPUHomeChanges: func(to string) float64 {
			p, m, sp := s.cpu.Changes()
			return float64(map[string]uint64{"pinned": p, "moved": m, "spread": sp}[to])
		},
	})
}

// intentFailures counts the job starts whose intent could not be written.
func (s *Server) intentFailures() float64 {
	if s.jw.intents == nil { // (before recover)
		return 0
	}
	return float64(s.jw.intents.Failures.Load())
}

// cgroupBasePrefix starts the name of every supervisor's job cgroup base.
const cgroupBasePrefix = "exec-supervisor-"

// cgroupBaseName names the job cgroup base of the state directory dir:
// one per state directory, however it is spelled (relative, through a
// symlink, with a trailing slash: a restart that spelled it otherwise
// looked for the leftovers of its previous run in another base).
func cgroupBaseName(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	return legacyCgroupBaseName(dir)
}

// legacyCgroupBaseName is the base name versions before cgroupBaseName
// gave the state directory dir (from the string as given): the leftovers
// of a supervisor of such a version are found there.
func legacyCgroupBaseName(dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return cgroupBasePrefix + hex.EncodeToString(sum[:4])
}
