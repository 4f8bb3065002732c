package jobs

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/notify"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// jobNotify is what a notify job's run was told through its notify
// socket (sd_notify: READY, STATUS, STOPPING, WATCHDOG). Guarded by
// Job.mu; watchdog is set before the job is visible, never changed.
type jobNotify struct {
	// Notify jobs: the run's notify socket and what it was told.
	sock         *notify.Socket
	ready        bool
	status       string
	stopping     bool
	lastWatchdog time.Time
	watchdog     time.Duration
	watchdogT    *time.Timer
}

// notifyInfoLocked fills the notify fields of info.
func (j *Job) notifyInfoLocked(info *protocol.JobInfo) {
	info.Notify = j.spec.Notify
	if j.spec.Notify && (j.life.State == Running || j.life.State == Exiting) {
		info.Ready, info.NotifyStatus, info.Stopping = j.notify.ready, j.notify.status, j.notify.stopping
		info.LastWatchdogAt = ms(j.notify.lastWatchdog)
	}
}

// notifyPath is the current run's notify socket path (its directory is
// made when missing; never through a symlink).
func (j *Job) notifyPath() (string, error) {
	dir := j.m.notifyDir
	if dir == "" {
		return "", fmt.Errorf("notify needs the supervisor's state directory (none configured)")
	}
	if err := notify.EnsureDir(dir); err != nil {
		return "", fmt.Errorf("notify socket directory: %w", err)
	}
	return filepath.Join(dir, fmt.Sprintf("%s.%d.sock", j.id, j.svc.attempt)), nil
}

// openNotify creates the run's notify socket and returns env with
// NOTIFY_SOCKET (and WATCHDOG_USEC) set. Only processes of this run (its
// cgroup, else its process group or session) are heard.
func (j *Job) openNotify(env []string, runDone, runStarted <-chan struct{}) ([]string, error) {
	path, err := j.notifyPath()
	if err != nil {
		return env, err
	}
	accept := func(pid int) bool {
		// The child may speak before start() recorded it: wait for that.
		select {
		case <-runStarted:
		case <-runDone:
			return false
		}
		return j.ownsPid(pid, runDone)
	}
	sock, err := notify.Listen(path, accept, func(msg notify.Message) { j.notified(msg, runDone) })
	if err != nil {
		return env, fmt.Errorf("notify socket: %w", err)
	}
	j.mu.Lock()
	j.notify.sock = sock
	j.mu.Unlock()
	env = setEnv(env, "NOTIFY_SOCKET", sock.Addr())
	if j.notify.watchdog > 0 {
		env = setEnv(env, "WATCHDOG_USEC", strconv.FormatInt(j.notify.watchdog.Microseconds(), 10))
	}
	return env, nil
}

func closeNotify(s *notify.Socket) {
	if s != nil {
		_ = s.Close()
	}
}

// ownsPid reports whether pid is a process of the current run.
func (j *Job) ownsPid(pid int, runDone <-chan struct{}) bool {
	j.mu.Lock()
	cg, pgid, isPTY := j.run.cg, j.run.pgid, j.in.isPTY
	gone := over(runDone)
	j.mu.Unlock()
	if gone || pid <= 1 {
		return false
	}
	if cg != nil {
		for _, p := range cg.Procs() {
			if p == pid {
				return true
			}
		}
		return false
	}
	p, ok := proc.Lookup(pid)
	if !ok {
		return false
	}
	if isPTY {
		return p.Sid == pgid
	}
	return p.Pgid == pgid
}

// notified applies one notify message of the run.
func (j *Job) notified(msg notify.Message, runDone <-chan struct{}) {
	j.mu.Lock()
	if over(runDone) {
		j.mu.Unlock()
		return
	}
	if st, ok := msg.Status(); ok {
		j.notify.status = truncateUTF8(st, 1024)
	}
	if msg.Stopping() {
		j.notify.stopping = true
	}
	if msg.Watchdog() {
		j.notify.lastWatchdog = j.m.now()
	}
	trigger := msg.Fields["WATCHDOG"] == "trigger"
	if msg.Ready() && !j.notify.ready {
		j.notify.ready = true
		j.keepExtraLocked(j.emitLocked(protocol.KindReady, protocol.ReadyPayload{Attempt: j.svc.attempt, Status: j.notify.status}))
		j.m.log.Info("job ready", "job", j.id, "attempt", j.svc.attempt, "status", j.notify.status)
	}
	j.m.changed()
	j.mu.Unlock()
	if trigger {
		j.m.log.Warn("job asked for its watchdog to fire (WATCHDOG=trigger)", "job", j.id)
		j.killRun(runDone, protocol.ReasonWatchdog)
	}
}

func truncateUTF8(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// watchdogFired checks the run's last WATCHDOG=1: a run silent for the
// whole interval is hung and killed with reason watchdog.
func (j *Job) watchdogFired(runDone <-chan struct{}) {
	j.mu.Lock()
	if over(runDone) || j.life.State != Running {
		j.mu.Unlock()
		return
	}
	last := j.notify.lastWatchdog
	if last.IsZero() || last.Before(j.startedAt) {
		last = j.startedAt
	}
	if quiet := j.m.now().Sub(last); quiet < j.notify.watchdog {
		j.notify.watchdogT = time.AfterFunc(j.notify.watchdog-quiet, func() { j.watchdogFired(runDone) })
		j.mu.Unlock()
		return
	}
	j.mu.Unlock()
	j.m.log.Warn("job missed its watchdog; killing it as hung", "job", j.id, "interval", j.notify.watchdog)
	j.killRun(runDone, protocol.ReasonWatchdog)
}
