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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/buildinfo"
	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/cpuhome"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/metrics"
	"github.com/exec-supervisor/exec-supervisor/internal/notify"
	"github.com/exec-supervisor/exec-supervisor/internal/zmqx"
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
	// cgroupBase is where job cgroups go (nil: none); cgroupNote says why not.
	cgroupBase *cgroups.Base
	cgroupNote string
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

	ctx    context.Context // cancelled by Close: ends the sockets
	cancel context.CancelFunc
	ctl    *zmqx.Router
	evt    *zmqx.Publisher
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

	journal        *journal.Journal
	intents        *journal.Intents               // set by recover (Start stops without one)
	intentErr      atomic.Pointer[journalFailure] // while intents cannot be written (health)
	lastIntentWarn atomic.Int64                   // unix ns of the last intent failure logged
	lock           *journal.Lock
	journalDirty   chan struct{}
	stopJournal    chan struct{}
	journalWG      sync.WaitGroup
	journalMu      sync.Mutex                     // serializes writes
	journalFailing bool                           // under journalMu
	journalErr     atomic.Pointer[journalFailure] // while journal writes fail (health)
	finalJournal   atomic.Bool                    // Close's last write is under way (no retry follows)
	members        map[string][]journal.Member    // under journalMu: last group scan
	recCache       map[string]cachedRecord        // under journalMu: encoded finished records
	recGen         uint64                         // under journalMu: writes so far (cachedRecord.gen)
	encBuf         [][]byte                       // under journalMu: the records of a write, reused
	finBuf         []finRecord                    // under journalMu: the finished records of a write, reused
	// Durable replies (see awaitJournal): tickets taken, and the newest
	// ticket a finished write attempt covered, with a channel closed
	// (and replaced) after each attempt.
	journalTickets   atomic.Uint64
	attemptMu        sync.Mutex
	attempted        uint64 // under attemptMu
	landed           uint64 // under attemptMu: the newest ticket a successful write covered
	attemptDone      chan struct{}
	lastDurableWarn  atomic.Int64     // unix ns of the last "reply before the journal" warning
	leaderScanned    map[string]bool  // under journalMu: jobs whose members were scanned for their leaderExit
	lastScan         time.Time        // under journalMu: the last member scan
	scannedRuns      map[string]int64 // under journalMu: the runs (job id: startedAt) the last scan saw running
	youngScanAt      time.Time        // under journalMu: when young jobs' members are due (zero: none)
	journalOverBound bool             // under journalMu: running jobs and services alone passed JournalMaxBytes
	// Counters for metrics and health.
	journalCorrupt    atomic.Uint64
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
		journal: journal.New(cfg.JournalPath()), journalDirty: make(chan struct{}, 1), stopJournal: make(chan struct{}),
		attemptDone: make(chan struct{}),
	}
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
	fi, err := os.Lstat(path)
	if err != nil {
		return nil // (created by the first write; its directory is checked above)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("--journal %s exists and is not a regular file (%s): refusing to move it aside or replace it", path, fi.Mode().Type())
	}
	return nil
}

// InstanceID identifies this run of the supervisor; it changes on restart.
func (s *Server) InstanceID() string { return s.instanceID }

// Start creates the state directory, opens the sockets and the metrics
// endpoint, and starts serving. On error everything opened is closed.
func (s *Server) Start(ctx context.Context) (err error) {
	if err := os.MkdirAll(s.cfg.StateDir, 0o700); err != nil {
		return &ConfigError{fmt.Errorf("--state-dir: create %s: %w", s.cfg.StateDir, err)}
	}
	if fi, err := os.Lstat(s.cfg.StateDir); err != nil || !fi.IsDir() {
		return &ConfigError{fmt.Errorf("--state-dir %s is not a directory (symlinks are refused)", s.cfg.StateDir)}
	}
	// What is read back from it (journal: jobs to resume and processes to
	// terminate; token) must be ours alone: a directory another user made,
	// or can write to, is refused.
	if err := zmqx.CheckDir(s.cfg.StateDir, false); err != nil {
		return &ConfigError{fmt.Errorf("--state-dir: %w", err)}
	}
	if jd := filepath.Dir(s.cfg.JournalPath()); jd != filepath.Clean(s.cfg.StateDir) {
		// (A journal that can never be written is no journal: nothing
		// would be recovered after a crash. Not made: a typo would be.)
		if err := zmqx.CheckDir(jd, false); errors.Is(err, os.ErrNotExist) {
			return &ConfigError{fmt.Errorf("--journal %s: directory %s does not exist (create it, mode 0700, or leave --journal out for <state-dir>/journal.json)", s.cfg.Journal, jd)}
		} else if err != nil {
			return &ConfigError{fmt.Errorf("--journal: %w", err)}
		}
	}
	// The journal is replaced and, unreadable, moved aside: a path that is
	// not a journal's (a directory: the state directory itself, /etc; the
	// lock or the token, which would then be renamed away) is refused.
	if err := checkJournalPath(s.cfg); err != nil {
		return &ConfigError{err}
	}
	// One state directory, one owner: taken before anything else.
	if s.lock, err = journal.Acquire(s.cfg.StateDir, s.instanceID); err != nil {
		return fmt.Errorf("--state-dir: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.pub = newPublisher(s.log, nil, s.cfg.EventHWM)
	s.pub.queuedOnly = s.cfg.EventsQueuedOnly
	s.metrics = s.newMetrics()
	s.pub.onPublished = func(k protocol.Kind) { s.metrics.EventsPublished.WithLabelValues(string(k)).Inc() }
	notifyDir := filepath.Join(s.cfg.StateDir, "notify")
	// (Not a symlink someone planted: the sockets would be made where it
	// points.)
	if err := notify.CheckDir(notifyDir); err != nil {
		s.lock.Release()
		s.cancel()
		return &ConfigError{fmt.Errorf("--state-dir: %w", err)}
	}
	// (a crashed predecessor's notify jobs left their sockets: nobody
	// listens on them, and a resumed service binds a new name)
	if n, err := notify.RemoveStale(notifyDir); err != nil {
		s.log.Warn("notify sockets of an earlier run not removed", "dir", notifyDir, "err", err)
	} else if n > 0 {
		s.log.Info("removed notify sockets left by an earlier run", "dir", notifyDir, "count", n)
	}
	if s.lock.WriteErr != nil {
		s.log.Warn("the state directory's lock file could not be written", "err", s.lock.WriteErr)
	}
	// After a clean stop, a new mark: what the previous run's jobs left
	// running outside their groups was let go, and is never taken for
	// what this run leaves.
	var moved string
	if s.mark, moved, err = loadStateMark(s.cfg.StateDir, s.lock.PreviousStopped); err != nil {
		s.lock.Release()
		s.cancel()
		return fmt.Errorf("--state-dir: %w", err)
	}
	if moved != "" {
		s.log.Error("state mark unusable; moved aside and a new one made: processes an earlier run left running are not found by their mark", "movedTo", moved)
	}
	checkFDBudget(s.cfg, s.log)
	s.cpu = cpuhome.New(s.cfg.CPUHome, s.cfg.CPUHomeTuning, s.log)
	jopts := []jobs.Option{jobs.WithNotifyDir(notifyDir), jobs.WithMark(s.mark), jobs.WithForkAround(s.cpu.Fork)}
	if s.cfg.LimitsHelper != "" {
		jopts = append(jopts, jobs.WithLimitsHelper(s.cfg.LimitsHelper))
	}
	if !s.cfg.NoCgroups {
		base, err := cgroups.Detect(s.cfg.CgroupParent, cgroupBaseName(s.cfg.StateDir))
		if err != nil && s.cfg.CgroupParent != "" {
			// Asked for by name: a typo must not quietly cost every job
			// its containment.
			s.lock.Release()
			s.cancel()
			return &ConfigError{fmt.Errorf("--cgroup-parent %s: %w (or start with --no-cgroups to run jobs in process groups only)", s.cfg.CgroupParent, err)}
		}
		if err != nil {
			s.cgroupNote = err.Error()
			s.log.Warn("no cgroup per job: falling back to process groups (a child that leaves its process group can escape)", "reason", err)
		} else {
			s.cgroupBase = base
			jopts = append(jopts, jobs.WithCgroups(base))
			s.log.Info("each job gets a cgroup", "dir", base.Dir)
		}
	} else {
		s.cgroupNote = "disabled with --no-cgroups"
		s.log.Info("no cgroup per job (--no-cgroups): process groups only (a child that leaves its process group can escape)")
	}
	s.jobs = jobs.New(s.cfg.Jobs, s.log, s.pub, append(jopts, jobs.WithHooks(jobs.Hooks{
		Changed:          s.markDirty,
		Started:          s.recordIntent,
		BeforeServiceRun: s.journalBeforeRun,
		Spawned:          s.metrics.Spawned.Inc,
		Restarted:        s.metrics.Restarts.Inc,
		RunEnded:         s.countTimeout,
		Finished:         s.countFinished,
		OutputBytes:      func(st protocol.Stream, n int) { s.metrics.OutputBytes.WithLabelValues(string(st)).Add(float64(n)) },
		CleanupKill:      func(mode string) { s.metrics.CleanupKills.WithLabelValues(mode).Inc() },
		OwnershipEscape:  s.metrics.OwnershipEscapes.Inc,
		OutputHeld: func(held bool) {
			if held {
				s.metrics.OutputHeld.Inc()
			} else {
				s.metrics.OutputHeld.Dec()
			}
		},
		PaceStalled: s.metrics.PaceStalls.Inc,
	}))...)
	defer func() {
		if err != nil {
			_ = s.jobs.Close(context.Background())
			s.lock.Release()
			s.cancel()
			if s.ctl != nil {
				s.ctl.Close()
			}
			if s.evt != nil {
				s.evt.Close()
			}
			if s.httpL != nil {
				s.httpL.Close()
			}
			if s.cgroupBase != nil {
				_ = s.cgroupBase.Close() // (no job ran: it is empty)
			}
		}
	}()
	if s.cfg.usesTCP() {
		if s.cfg.InsecureTCP {
			s.log.Warn("INSECURE: tcp endpoints accept clients WITHOUT authentication (--insecure-tcp-no-auth): anyone who can reach them can run commands as this user and read all job output")
		} else {
			tok, created, err := loadOrCreateToken(s.cfg.TokenPath())
			if err != nil {
				return &ConfigError{fmt.Errorf("--token-file: %w", err)}
			}
			s.token = tok
			s.log.Info("tcp clients must authenticate with the token (ZMTP PLAIN password)", "tokenFile", s.cfg.TokenPath(), "created", created)
		}
	}
	// Control peers send requests; event peers only subscriptions.
	if s.evt, err = zmqx.ListenPub(s.ctx, s.cfg.Event, s.policy(s.cfg.Event, 64<<10), s.cfg.SubscriberQueueBytes); err != nil {
		return fmt.Errorf("--event: %w", err)
	}
	if s.ctl, err = zmqx.ListenRouter(s.ctx, s.cfg.Control, s.policy(s.cfg.Control, uint64(s.cfg.MaxRequestBytes)+64<<10), 0); err != nil {
		return fmt.Errorf("--control: %w", err)
	}
	if s.cfg.MetricsAddr != "" {
		if s.httpL, err = net.Listen("tcp", s.cfg.MetricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
	}
	if s.cfg.Subreaper {
		if err := s.jobs.EnableSubreaper(); err != nil {
			s.log.Warn("cannot become a child subreaper; orphaned descendants go to init", "err", err)
		}
	}
	// Settle what a previous run left behind before serving anyone.
	resume, err := s.recover()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	// From here on this run may leave processes behind: its crash must
	// not pass for the previous run's clean stop.
	if err := s.lock.ClearStopped(); err != nil {
		return fmt.Errorf("--state-dir: the previous run's clean stop cannot be cleared from its lock file (a crash of this run would pass for a clean stop, and what it left running would not be looked for): %w", err)
	}
	s.resumeServices(resume) // (each run is journaled before it starts: BeforeServiceRun)
	s.writeJournal(false)

	s.pub.sock = eventSink{s}
	s.pubWG.Add(1)
	go func() { defer s.pubWG.Done(); s.pub.run(s.stopPub, 2*time.Second) }()
	s.wg.Add(2)
	go s.recvLoop()
	// From now on each peer's reader hands its requests over itself (one
	// goroutine handoff less per request than going through recvLoop).
	s.ctl.SetHandler(func(m zmqx.Incoming) { s.incoming(m) })
	go s.heartbeatLoop()
	if s.cpu.Enabled() {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.cpu.Run(s.ctx) }()
	}
	s.journalWG.Add(1)
	go func() { defer s.journalWG.Done(); s.journalLoop(s.stopJournal) }()
	if s.httpL != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.metrics.Handler())
		s.httpS = newMetricsServer(mux, s.cfg.MetricsIdleTimeout)
		l := newLimitListener(s.httpL, s.cfg.MetricsMaxConns, s.metrics.ConnRejected.WithLabelValues(metrics.RejectMetricsConns).Inc)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.httpS.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("metrics server", "err", err)
			}
		}()
	}
	metrics := s.cfg.MetricsAddr
	if s.httpL != nil {
		metrics = s.httpL.Addr().String() // (the port bound, when :0 asked for any)
	}
	s.log.Info("supervisor started", "instance", s.instanceID, "control", s.cfg.Control, "event", s.cfg.Event,
		"metrics", metrics, "stateDir", s.cfg.StateDir, "journal", s.journal.Path(), "maxJobs", s.cfg.Jobs.MaxJobs, "pid", os.Getpid())
	return nil
}

// Addr returns the bound address of the control socket (useful with tcp port 0).
func (s *Server) Addr() net.Addr { return s.ctl.Addr() }

// EventAddr returns the bound address of the event socket.
func (s *Server) EventAddr() net.Addr {
	s.evtMu.RLock()
	defer s.evtMu.RUnlock()
	return s.evt.Addr()
}

// EventSubscribers counts the connections subscribed to the event socket.
func (s *Server) EventSubscribers() int {
	s.evtMu.RLock()
	defer s.evtMu.RUnlock()
	if s.evt == nil {
		return 0
	}
	return s.evt.Subscribers()
}

// eventSink hands the publisher's events to the current event socket.
type eventSink struct{ s *Server }

func (e eventSink) SendParts(topic []byte, parts ...[]byte) error {
	e.s.evtMu.RLock()
	defer e.s.evtMu.RUnlock()
	return e.s.evt.SendParts(topic, parts...)
}

// RestartEventSocket closes the event socket, disconnecting every
// subscriber, and listens again on the same endpoint. Events published in
// between reach nobody (as with any PUB socket without subscribers); they
// stay retained, and clients that reconnect backfill them with subscribe.
func (s *Server) RestartEventSocket() error {
	s.evtMu.Lock()
	defer s.evtMu.Unlock()
	if err := s.evt.Close(); err != nil {
		s.log.Warn("closing the event socket", "err", err)
	}
	evt, err := zmqx.ListenPub(s.ctx, s.cfg.Event, s.policy(s.cfg.Event, 64<<10), s.cfg.SubscriberQueueBytes)
	if err != nil {
		return fmt.Errorf("reopen --event %s: %w", s.cfg.Event, err)
	}
	s.evt = evt
	s.log.Warn("event socket restarted: subscribers were disconnected", "endpoint", s.cfg.Event)
	return nil
}

// MetricsAddr returns the bound metrics address, or nil.
func (s *Server) MetricsAddr() net.Addr {
	if s.httpL == nil {
		return nil
	}
	return s.httpL.Addr()
}

// Close shuts down: no new spawns; in "wait" mode running jobs get up to
// ShutdownTimeout to finish; then running jobs are terminated through the
// normal kill path; remaining events are flushed, the journal written, the
// sockets closed. The terminate phase is bounded by ShutdownTimeout (after
// a wait phase: by the grace period plus 5 s). Cancelling ctx (e.g. on a
// second signal) cuts every wait short: jobs are SIGKILLed at once.
// Idempotent.
func (s *Server) Close(ctx context.Context) error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()
	s.log.Info("supervisor shutting down", "instance", s.instanceID, "mode", s.cfg.ShutdownMode)
	close(s.draining)
	s.jobs.Drain()
	bound := s.cfg.ShutdownTimeout
	if s.cfg.ShutdownMode == "wait" {
		active, _ := s.jobs.Counts()
		s.log.Info("waiting for running jobs to finish", "jobs", active, "bound", s.cfg.ShutdownTimeout)
		wctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
		s.jobs.Wait(wctx)
		cancel()
		bound = s.cfg.Jobs.Grace + 5*time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	jerr := s.jobs.Close(ctx)
	if jerr != nil {
		s.log.Error("jobs did not all finish in time", "err", jerr)
	}
	// Let in-flight requests finish and their replies go out.
	s.reqMu.Lock()
	s.reqStopped = true
	s.reqMu.Unlock()
	waitCtx(ctx, &s.reqWG)
	close(s.stopPub)
	s.pubWG.Wait()
	if s.httpS != nil {
		_ = s.httpS.Shutdown(ctx)
	}
	s.cancel()
	// Replies still held for waits give up now (callbacks on s.ctx, off
	// any goroutine of ours): let them finish releasing what they hold.
	gctx, gcancel := context.WithTimeout(context.Background(), time.Second)
	waitCtx(gctx, &s.reqWG)
	gcancel()
	s.ctl.Close()
	s.evtMu.Lock()
	s.evt.Close()
	s.evtMu.Unlock()
	s.wg.Wait()
	close(s.stopJournal)
	s.journalWG.Wait()
	s.finalJournal.Store(true)
	s.writeJournal(false)
	if s.intents != nil {
		_ = s.intents.Close()
	}
	if s.cgroupBase != nil {
		// After a forced shutdown the last job cgroups are removed by their
		// waiters a moment later: give them that moment.
		var err error
		for deadline := time.Now().Add(2 * time.Second); ; {
			if err = s.cgroupBase.Close(); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond) // waiting for job cgroups to be removed
		}
		if err != nil {
			s.log.Warn("job cgroup directory left behind", "err", err)
		}
	}
	// (The socket files went with the listeners, if still theirs.)
	if jerr == nil && !s.sweepLeft && s.jobs.OrphansLeft() == 0 {
		// Every job ended, and what they left outside their groups (that
		// the supervisor adopted), and the start found none of an earlier
		// run left: the next start has no leftovers to look for.
		if err := s.lock.MarkStopped(); err != nil {
			s.log.Warn("clean stop not noted in the lock file: the next start will look for leftover processes", "err", err)
		}
	}
	s.lock.Release()
	s.log.Info("supervisor stopped", "instance", s.instanceID)
	return jerr
}

func waitCtx(ctx context.Context, wg *sync.WaitGroup) {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// ConfigError is a Start failure due to an option (a path that does not
// exist, a cgroup parent that cannot be used): the command exits 2, as
// for an option that does not validate.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Run starts a server and serves until ctx is cancelled, then closes it.
// Cancelling force during the shutdown makes it fast (see Close).
func Run(ctx, force context.Context, cfg Config, log *slog.Logger) error {
	s, err := New(cfg, log)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	return s.Close(force)
}

func (s *Server) heartbeatLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.stopPub:
			return
		case <-t.C:
			active, _ := s.jobs.Counts()
			ev, _ := protocol.NewEvent("", 0, time.Now().UnixMilli(), protocol.KindHeartbeat, protocol.HeartbeatPayload{
				InstanceID: s.instanceID, StartedAt: s.startedAt.UnixMilli(), ActiveJobs: active,
				Published: s.pub.published.Load(), Dropped: s.pub.dropped.Load(), IntervalMs: s.cfg.HeartbeatInterval.Milliseconds(),
			})
			s.pub.Publish(ev)
		}
	}
}

// recvLoop handles the control requests queued before the peers' readers
// were told to hand requests over directly (see Start), until the socket
// closes.
func (s *Server) recvLoop() {
	defer s.wg.Done()
	for {
		msg, err := s.ctl.Recv()
		if err != nil {
			return // closed
		}
		if !s.incoming(msg) {
			return
		}
	}
}

// incoming takes one control request, on its peer's reader goroutine (or
// recvLoop's), and hands it to a worker. A message is [identity, "",
// body] (REQ, or DEALER speaking the REQ envelope) or [identity, body]
// (bare DEALER); replies use the same envelope. It reports false when the
// server is stopping.
func (s *Server) incoming(msg zmqx.Incoming) bool {
	if len(msg.Frames) < 1 || msg.Peer.Closed() {
		msg.Peer.Release() // nobody left to answer
		return true
	}
	envelope, body := [][]byte(nil), msg.Frames
	if len(body) >= 2 && len(body[0]) == 0 {
		envelope, body = msg.Frames[:1], body[1:]
	}
	if len(body) != 1 {
		s.reply(msg.Peer, envelope, protocol.ErrorReply("", protocol.Errorf(protocol.CodeBadRequest,
			"request must be one body frame after the envelope; got %d frames", len(body))))
		msg.Peer.Release()
		return true
	}
	select {
	case s.inflight <- struct{}{}:
	case <-s.ctx.Done():
		msg.Peer.Release()
		return false
	}
	// Close waits for handlers; once it has started waiting, no new
	// handler may be added (a WaitGroup must not grow during Wait).
	s.reqMu.Lock()
	if s.reqStopped {
		s.reqMu.Unlock()
		<-s.inflight
		s.reply(msg.Peer, envelope, protocol.ErrorReply("", protocol.Errorf(protocol.CodeShuttingDown, "supervisor is shutting down")))
		msg.Peer.Release()
		return true
	}
	s.reqWG.Add(1)
	s.reqMu.Unlock()
	p, env := msg.Peer, envelope
	start := time.Now()
	req, derr := protocol.DecodeRequest(body[0], s.cfg.MaxRequestBytes)
	task := func() {
		defer s.reqWG.Done()
		defer func() { <-s.inflight }()
		defer p.Release()
		if p.Closed() {
			return // the peer went away while this waited
		}
		out, w := s.handle(p, req, derr, start)
		if w != nil {
			s.holdReply(p, env, w)
			return
		}
		s.reply(p, env, out)
	}
	if msg.Alone && derr == nil && quickOp(req.Op) {
		// The peer waits for this reply and sent nothing else: no
		// hand-off to a worker (waking one cost 10-40 µs of CPU and 2-3
		// context switches per request, measured on spawns one at a
		// time). What the peer sends meanwhile waits in the socket, so
		// only ops that never wait on anything are handled here.
		task()
		return true
	}
	if derr == nil && req.ID != "" && (req.Op == protocol.OpSpawn || req.Op == protocol.OpWait) {
		// A cancel read after this may be handled before it is held
		// (see heldCounts.pending).
		k := heldKey{p, req.ID}
		s.notePending(k)
		run := task
		task = func() { defer s.clearPending(k); run() }
	}
	// An idle worker takes it, else a new one starts (at most
	// MaxInFlight run at once, bounded by inflight above).
	select {
	case s.work <- task:
	default:
		s.wg.Add(1)
		go s.worker(task)
	}
	return true
}

// workerIdle is how long a request worker waits for more work before it
// ends. Workers are kept (rather than a goroutine per request) because a
// spawn runs deep enough to grow a fresh goroutine's stack several times.
const workerIdle = 10 * time.Second

// worker runs task, then further requests handed to it, until it has been
// idle for workerIdle or the server stops.
func (s *Server) worker(task func()) {
	defer s.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		task()
		idle.Reset(workerIdle)
		select {
		case task = <-s.work:
		case <-idle.C:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// reply queues the reply for the peer's own writer: it never waits for a
// slow peer (one whose queue overflows is disconnected).
func (s *Server) reply(p *zmqx.Peer, env [][]byte, body []byte) {
	frames := append(env[:len(env):len(env)], body)
	if err := s.ctl.Send(p, frames); err != nil && s.ctx.Err() == nil {
		s.log.Debug("control reply not queued", "err", err)
	}
}

// spawnOptions takes a spawn's pace (a property of the request, not of
// the job) out of a: the asking peer p paces the job from its first byte.
func (s *Server) spawnOptions(p *zmqx.Peer, a *protocol.SpawnArgs) (protocol.SpawnArgs, jobs.SpawnOptions) {
	var o jobs.SpawnOptions
	if a.Pace {
		o = jobs.SpawnOptions{Pacer: p, PaceWatch: paceWatch(p)}
	}
	a.Pace = false
	return *a, o
}

// paceWatch releases a pace of peer p when p goes away. While it paces a
// job, p is not idle (never evicted as such: its job would run unpaced).
func paceWatch(p *zmqx.Peer) func(release func()) func() bool {
	return func(release func()) func() bool {
		p.Hold()
		stop := p.OnGone(release)
		return func() bool {
			p.Unhold()
			return stop()
		}
	}
}

// quickOp reports whether op may be handled on the peer's reader (see
// incoming): it never waits for a job, a pipe or a long encoding. (write
// may wait 2 s for a job to read its input; list-jobs, subscribe and
// history may encode large replies; stop and restart end runs.)
func quickOp(op protocol.Op) bool {
	switch op {
	case protocol.OpSpawn, protocol.OpWait, protocol.OpStatus, protocol.OpHealth, protocol.OpPoll, protocol.OpCancel, protocol.OpPace:
		return true
	}
	return false
}

// handle runs one request from peer p (decoded at start: req, or the
// decoding error err) and returns the encoded reply, or
// the wait the reply is held for (see holdReply). It never panics on bad
// input; a panic in an op is turned into an internal error.
func (s *Server) handle(p *zmqx.Peer, req *protocol.Request, err error, start time.Time) (out []byte, w *heldReply) {
	id, op := "", protocol.Op("")
	if req != nil {
		id, op = req.ID, req.Op
	}
	code := "ok"
	defer func() { s.metrics.ObserveRequest(op, code, time.Since(start)) }()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in request handler", "op", string(req.Op), "panic", r)
			out, w = protocol.ErrorReply(id, protocol.Errorf(protocol.CodeInternal, "internal error")), nil
		}
	}()
	if err != nil {
		s.log.Debug("bad request", "err", err)
		pe := toWire(err)
		code = string(pe.Code)
		return protocol.ErrorReply(id, pe), nil
	}
	result, err := s.dispatch(p, req)
	if h, ok := result.(*heldReply); ok && err == nil {
		h.id = id
		return nil, h
	}
	if err != nil {
		pe := toWire(err)
		code = string(pe.Code)
		s.log.Debug("request failed", "op", string(req.Op), "code", string(pe.Code), "err", pe.Message, "took", time.Since(start))
		return protocol.ErrorReply(id, pe), nil
	}
	b, err := protocol.OKReply(id, result)
	if err != nil {
		return protocol.ErrorReply(id, protocol.Errorf(protocol.CodeInternal, "encode reply: %v", err)), nil
	}
	if len(b) > protocol.MaxReplyBytes {
		return protocol.ErrorReply(id, protocol.Errorf(protocol.CodeTooLarge, "reply would be %d bytes; ask for less", len(b))), nil
	}
	return b, nil
}

// toWire maps any error to a wire error: *protocol.Error passes through,
// anything else is internal.
func toWire(err error) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	return protocol.Errorf(protocol.CodeInternal, "%v", err)
}

func (s *Server) dispatch(p *zmqx.Peer, req *protocol.Request) (any, error) {
	switch req.Op {
	case protocol.OpHealth:
		if err := protocol.DecodeArgs(req, nil); err != nil { // (none, but checked as any op's)
			return nil, err
		}
		active, total := s.jobs.Counts()
		draining := false
		select {
		case <-s.draining:
			draining = true
		default:
		}
		return protocol.HealthResult{
			OK: !draining, InstanceID: s.instanceID, Protocol: protocol.Version, Version: Version,
			Pid: os.Getpid(), StartedAt: s.startedAt.UnixMilli(), UptimeMs: time.Since(s.startedAt).Milliseconds(),
			ActiveJobs: active, TotalJobs: total, MaxJobs: s.cfg.Jobs.MaxJobs, Draining: draining,
			// (Both may quote paths the operator chose: sent as UTF-8.)
			Cgroups: s.cgroupBase != nil, CgroupsNote: strings.ToValidUTF8(s.cgroupNote, "\uFFFD"),
			JournalError: strings.ToValidUTF8(s.journalHealth(), "\uFFFD"),
		}, nil
	case protocol.OpSpawn:
		var a protocol.SpawnArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.WaitMs > 0 {
			return s.spawnAndWait(p, req.ID, a)
		}
		_, info, err := s.jobs.SpawnJobWith(s.spawnOptions(p, &a))
		if err != nil {
			return nil, err
		}
		return protocol.SpawnResult{JobID: info.JobID, Job: info}, nil
	case protocol.OpWait:
		return s.wait(p, req)
	case protocol.OpPace:
		var a protocol.PaceArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		if a.Release {
			j.Unpace(p)
		} else if err := j.Pace(p, a.Offset, paceWatch(p)); err != nil {
			return nil, err
		}
		return protocol.PaceResult{WindowBytes: s.jobs.PaceWindow(), Job: j.Info()}, nil
	case protocol.OpCancel:
		var a protocol.CancelArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		ok, job := s.cancelHeld(p, a.RequestID)
		return protocol.CancelResult{Cancelled: ok, JobID: job}, nil
	case protocol.OpPoll:
		var a protocol.PollArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		res, err := j.Poll(a.Cursor, a.MaxBytes)
		res.InstanceID = s.instanceID
		return res, err
	case protocol.OpSubscribe:
		var a protocol.SubscribeArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		res, err := j.Events(a.FromSeq, a.Limit)
		res.InstanceID, res.HeartbeatIntervalMs = s.instanceID, s.cfg.HeartbeatInterval.Milliseconds()
		s.metrics.BackfillReqs.Inc()
		s.metrics.BackfillEvents.Add(float64(len(res.Events)))
		return res, err
	case protocol.OpWrite:
		var a protocol.WriteArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		n, err := j.WriteInput(a.Data, a.EOF, a.Typed)
		if err != nil {
			return nil, err
		}
		return protocol.WriteResult{Written: n, Job: j.Info()}, nil
	case protocol.OpResize:
		var a protocol.ResizeArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		if err := j.Resize(uint16(a.Rows), uint16(a.Cols)); err != nil { // (1..10000: Validate)
			return nil, err
		}
		info := j.Info()
		return protocol.StatusResult{Job: &info}, nil
	case protocol.OpKill:
		var a protocol.KillArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		return s.kill(a)
	case protocol.OpStatus:
		var a protocol.JobArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.JobID == "" {
			return s.statusAll()
		}
		j, err := s.jobs.Get(a.JobID)
		if err != nil {
			return nil, err
		}
		info := s.jobs.InfoWithUsage(j)
		return protocol.StatusResult{Job: &info}, nil
	case protocol.OpListJobs:
		var a protocol.ListJobsArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		return s.listJobs(a)
	case protocol.OpStart, protocol.OpRestart, protocol.OpStop, protocol.OpHistory:
		return s.serviceOp(req)
	case protocol.OpRemove:
		var a protocol.JobArgs
		if err := protocol.DecodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.JobID == "" {
			return nil, protocol.Errorf(protocol.CodeInvalidArgument, "jobId is required")
		}
		if err := s.jobs.Remove(a.JobID); err != nil {
			return nil, err
		}
		return protocol.RemoveResult{JobID: a.JobID}, nil
	}
	return nil, protocol.Errorf(protocol.CodeUnknownOp, "unknown op %q", req.Op)
}

// listJobs answers list-jobs: one page of the jobs after a.After, at most
// a.Limit of them and about ListPageBytes (at least one job when
// any is left), so that no listing is refused for being too large.
func (s *Server) listJobs(a protocol.ListJobsArgs) (protocol.ListJobsResult, error) {
	var created int64
	var afterN uint64
	var after string
	if a.After != "" {
		var err error
		if created, afterN, after, err = protocol.ParseListCursor(a.After); err != nil {
			return protocol.ListJobsResult{}, err
		}
	}
	jobs, ns := s.jobs.ListAfter(a.State, a.SessionID, a.IDPrefix, created, afterN, after)
	budget := s.cfg.ListPageBytes
	if budget <= 0 || budget > protocol.MaxListBytes {
		budget = protocol.MaxListBytes
	}
	n, size := 0, 0
	for ; n < len(jobs) && (a.Limit <= 0 || n < a.Limit); n++ {
		j := &jobs[n]
		if a.Brief {
			j.Argv, j.Shell, j.Cwd, j.Labels = nil, "", "", nil
		}
		// (what it takes in the reply, but usage: a few dozen bytes,
		// attached below)
		b, err := protocol.Marshal(j)
		if err != nil {
			return protocol.ListJobsResult{}, err
		}
		if n > 0 && size+len(b) > budget {
			break
		}
		size += len(b)
	}
	res := protocol.ListJobsResult{Jobs: jobs[:n:n], More: n < len(jobs)}
	if res.More {
		res.Next = protocol.ListCursor(jobs[n-1].CreatedAt, ns[n-1], jobs[n-1].JobID)
	}
	s.jobs.AttachUsage(res.Jobs)
	return res, nil
}

// serviceOp answers start, restart, stop and history.
func (s *Server) serviceOp(req *protocol.Request) (any, error) {
	var a protocol.JobArgs
	if err := protocol.DecodeArgs(req, &a); err != nil {
		return nil, err
	}
	if a.JobID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidArgument, "jobId is required")
	}
	switch req.Op {
	case protocol.OpStart, protocol.OpRestart:
		start := s.jobs.Start
		if req.Op == protocol.OpRestart {
			start = s.jobs.Restart
		}
		var before protocol.JobInfo
		if j, err := s.jobs.Get(a.JobID); err == nil {
			before = j.Info()
		}
		info, err := start(a.JobID)
		if err != nil {
			return nil, err
		}
		if req.Op == protocol.OpRestart || info.Attempt != before.Attempt || info.State != before.State {
			s.awaitJournal("start", a.JobID) // (a running service left alone changed nothing)
		}
		return protocol.StatusResult{Job: &info}, nil
	case protocol.OpStop:
		res, err := s.jobs.Stop(a.JobID)
		if err == nil && !res.AlreadyFinished {
			s.awaitJournal("stop", a.JobID)
		}
		return res, err
	}
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	return protocol.HistoryResult{JobID: a.JobID, Runs: j.History()}, nil
}

func (s *Server) kill(a protocol.KillArgs) (any, error) {
	j, err := s.jobs.Get(a.JobID)
	if err != nil {
		return nil, err
	}
	var sig = jobs.SigTerm
	if a.Signal != "" {
		sig, err = protocol.ParseSignal(a.Signal)
		if err != nil {
			return nil, err
		}
	}
	var already bool
	switch sig {
	case jobs.SigTerm, jobs.SigKill:
		already, err = j.Kill(protocol.ReasonManualCancel, sig)
		if err == nil && !already {
			s.awaitJournal("kill", a.JobID) // (the job's end is the client's: not lost in a crash)
		}
	default:
		if j.Finished() {
			already = true
		} else {
			err = j.Signal(sig)
		}
	}
	if err != nil {
		return nil, err
	}
	return protocol.KillResult{Job: j.Info(), AlreadyFinished: already}, nil
}

func (s *Server) newMetrics() *metrics.Metrics {
	f := func(v func() uint64) func() float64 { return func() float64 { return float64(v()) } }
	return metrics.New(metrics.Gauges{
		ActiveJobs:        func() float64 { a, _ := s.jobs.Counts(); return float64(a) },
		KnownJobs:         func() float64 { _, t := s.jobs.Counts(); return float64(t) },
		RingBytes:         func() float64 { return float64(s.jobs.RetainedBytes()) },
		QueueLength:       func() float64 { return float64(s.pub.queued()) },
		EventsDropped:     f(s.pub.dropped.Load),
		GapEvents:         f(s.pub.gapEvents.Load),
		JournalWrites:     f(s.journal.Writes.Load),
		JournalFailures:   f(s.journal.Failures.Load),
		JournalCorrupt:    f(s.journalCorrupt.Load),
		IntentFailures:    s.intentFailures,
		OrphansReconciled: f(s.orphansReconciled.Load),
		OrphansReaped:     func() float64 { return float64(s.jobs.Reaped()) },
		OrphansEnded:      func() float64 { return float64(s.jobs.OrphansEnded()) },
		JobsForgotten:     func() float64 { return float64(s.jobs.Forgotten()) },
		FinishedBytes:     func() float64 { _, b := s.jobs.FinishedRetained(); return float64(b) },
		Subscribers:       func() float64 { return float64(s.EventSubscribers()) },
		HeldWaits:         func() float64 { return float64(s.heldWaits()) },
		PacedJobs:         func() float64 { return float64(s.jobs.Paced()) },
		CPUHome:           func() float64 { return float64(s.cpu.Current()) },
		CPUHomeChanges: func(to string) float64 {
			p, m, sp := s.cpu.Changes()
			return float64(map[string]uint64{"pinned": p, "moved": m, "spread": sp}[to])
		},
	})
}

// intentFailures counts the job starts whose intent could not be written.
func (s *Server) intentFailures() float64 {
	if s.intents == nil { // (before recover)
		return 0
	}
	return float64(s.intents.Failures.Load())
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
