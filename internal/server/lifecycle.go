package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/cpuhome"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/metrics"
	"github.com/exec-supervisor/exec-supervisor/internal/notify"
	"github.com/exec-supervisor/exec-supervisor/internal/openclaw"
	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

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
	if err := statedir.Check(s.cfg.StateDir, false); err != nil {
		return &ConfigError{fmt.Errorf("--state-dir: %w", err)}
	}
	if jd := filepath.Dir(s.cfg.JournalPath()); jd != filepath.Clean(s.cfg.StateDir) {
		// (A journal that can never be written is no journal: nothing
		// would be recovered after a crash. Not made: a typo would be.)
		// A sticky directory others write to (/tmp) will do: nobody
		// else can replace our files there, and the journal package
		// makes none through a name someone else took (see
		// internal/journal/files.go); the files themselves are checked
		// below.
		if err := statedir.Check(jd, true); errors.Is(err, os.ErrNotExist) {
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
	if s.out, err = s.openOutlog(); err != nil {
		s.lock.Release()
		s.cancel()
		return &ConfigError{fmt.Errorf("--output-dir: %w", err)}
	}
	checkFDBudget(s.cfg, s.log)
	s.cpu = cpuhome.New(s.cfg.CPUHome, s.cfg.CPUHomeTuning, s.log)
	jopts := []jobs.Option{jobs.WithNotifyDir(notifyDir), jobs.WithMark(s.mark), jobs.WithForkAround(s.cpu.Fork), jobs.WithOutputLog(s.out)}
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
		Changed:          s.jw.markDirty,
		Started:          s.jw.recordIntent,
		BeforeServiceRun: s.jw.beforeRun,
		Spawned:          func() { s.started.Add(1); s.metrics.Spawned.Inc() },
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
	s.jw.jobs, s.jw.cgroups = s.jobs, s.cgroupBase != nil
	s.out.StartSweeper()
	defer func() {
		if err != nil {
			_ = s.jobs.Close(context.Background())
			s.closeOutlog(context.Background())
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
			if s.cfg.Curve {
				if err := s.setupCurve(); err != nil {
					return &ConfigError{err}
				}
			}
			if s.cfg.TCPLoopbackUID {
				s.log.Info("tcp clients on loopback running as our uid (or an --allow-uid) are admitted without the token, told by the kernel from their socket (--tcp-loopback-uid=false requires it from them too)",
					"uid", os.Geteuid(), "allowUIDs", s.cfg.AllowUIDs)
			}
		}
	}
	// Control peers send requests; event peers only subscriptions.
	if s.evt, err = s.listenEvents(); err != nil {
		return fmt.Errorf("--event: %w", err)
	}
	if s.ctl, err = zmtp.ListenRouter(s.ctx, s.cfg.Control, s.policy(s.cfg.Control, uint64(s.cfg.MaxRequestBytes)+64<<10), 0); err != nil {
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
	rc := &recovery{cfg: &s.cfg, log: s.log, jw: s.jw, jobs: s.jobs, cgroups: s.cgroupBase, lock: s.lock, mark: s.mark,
		reconciled: &s.orphansReconciled, countFinished: s.countFinished}
	resume, err := rc.run()
	s.sweepLeft = rc.sweepLeft
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	// From here on this run may leave processes behind: its crash must
	// not pass for the previous run's clean stop.
	if err := s.lock.ClearStopped(); err != nil {
		return fmt.Errorf("--state-dir: the previous run's clean stop cannot be cleared from its lock file (a crash of this run would pass for a clean stop, and what it left running would not be looked for): %w", err)
	}
	rc.resumeServices(resume) // (each run is journaled before it starts: BeforeServiceRun)
	s.jw.write(false)

	s.pub.sock = eventSink{s}
	s.pub.also = s.publishDialect
	s.pubWG.Add(1)
	go func() { defer s.pubWG.Done(); s.pub.run(s.stopPub, 2*time.Second) }()
	s.wg.Add(2)
	go s.recvLoop()
	// From now on each peer's reader hands its requests over itself (one
	// goroutine handoff less per request than going through recvLoop).
	s.ctl.SetHandler(func(m zmtp.Incoming) { s.incoming(m) })
	go s.heartbeatLoop()
	if s.cpu.Enabled() {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.cpu.Run(s.ctx) }()
	}
	s.jw.start()
	if s.httpL != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", s.metrics.Handler())
		mux.HandleFunc("/healthz", s.healthz)
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
		"metrics", metrics, "stateDir", s.cfg.StateDir, "journal", s.jw.journal.Path(), "maxJobs", s.cfg.Jobs.MaxJobs, "pid", os.Getpid())
	// Both sockets listen and recovery is done: ready.
	s.notifySystemd(fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=serving", os.Getpid()))
	if s.cfg.NotifySocket != "" && s.cfg.WatchdogInterval > 0 {
		s.wg.Add(1)
		go s.watchdogLoop()
	}
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

// listenEvents opens the event socket, counting the subscriptions to
// OpenClaw's dialect topics (see publishDialect).
func (s *Server) listenEvents() (*zmtp.Publisher, error) {
	evt, err := zmtp.ListenPub(s.ctx, s.cfg.Event, s.policy(s.cfg.Event, 64<<10), s.cfg.SubscriberQueueBytes,
		zmtp.CountPrefix(openclaw.TopicPrefix))
	if err != nil {
		return nil, err
	}
	s.dialectScope.Store(evt.Scope(openclaw.TopicPrefix))
	return evt, nil
}

// publishDialect publishes ev, just sent to the event socket, as an
// event of OpenClaw's dialect too: [exec:<jobId>, JSON], for subscribers
// of exec: topics. While none subscribes this is two atomic loads: no
// translation, no encoding.
func (s *Server) publishDialect(ev *protocol.Event) {
	if !s.dialectScope.Load().Active() {
		return
	}
	s.evtMu.RLock()
	defer s.evtMu.RUnlock()
	s.dialectEvents.Publish(ev, dialectSink{s.evt})
}

// subscriptionSyncMax bounds how long a dialect spawn waits for the
// subscribers' readers (see syncSubscriptions): they apply what they
// received in microseconds; only a subscriber that sent part of a frame
// and stopped holds a spawn that long.
const subscriptionSyncMax = 100 * time.Millisecond

// syncSubscriptions puts in force the subscriptions the event socket's
// subscribers sent before now (zmtp.Publisher.SyncSubscriptions): a
// gateway subscribed to exec:<jobId> before sending the spawn gets the
// job's first event, though it came on another connection.
func (s *Server) syncSubscriptions() {
	s.evtMu.RLock()
	defer s.evtMu.RUnlock()
	if s.evt != nil && !s.evt.SyncSubscriptions(subscriptionSyncMax) {
		s.log.Debug("a subscriber did not apply what it sent within the bound", "bound", subscriptionSyncMax)
	}
}

// dialectSink sends dialect events to the subscribers of their topic
// under the dialect's prefix (no native subscription gets them).
type dialectSink struct{ evt *zmtp.Publisher }

func (d dialectSink) Offer(topic []byte, body func() []byte) {
	d.evt.SendScoped(d.evt.Scope(openclaw.TopicPrefix), topic, body)
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
	evt, err := s.listenEvents()
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
	s.notifySystemd("STOPPING=1\nSTATUS=stopping: ending jobs")
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
	s.closeOutlog(ctx)
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
	s.jw.close()
	if s.cgroupBase != nil {
		// After a forced shutdown the last job cgroups are removed by their
		// waiters a moment later (each waits up to CgroupReleaseBound for
		// its cgroup to empty): give them that moment. (2 s was short
		// under load: the base stayed, and was empty once they were done.)
		var err error
		for deadline := time.Now().Add(jobs.CgroupReleaseBound + time.Second); ; {
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
