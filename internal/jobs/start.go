package jobs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// lookPath resolves file like a shell would, in the job's PATH.
func lookPath(file, path string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if path == "" {
		return "", fmt.Errorf("executable %s not found: the job's environment has no PATH (replaced without one?); give its full path, or set PATH", quoteClip(file))
	}
	return "", fmt.Errorf("executable %s not found in PATH", quoteClip(file))
}

// buildEnv returns the job's environment. With nothing to change it is
// the supervisor's own slice, shared: it must not be modified (setEnv
// copies). With a mark (WithMark) the job's mark is set last, replacing
// any value inherited or given.
func (j *Job) buildEnv() []string {
	mark := j.m.mark
	if len(j.spec.Env) == 0 && j.spec.EnvMode != protocol.EnvReplace {
		if mark == "" {
			return j.m.environ
		}
		base := j.m.environUnmarked
		return append(base[:len(base):len(base)], proc.EnvJobID+"="+j.id, proc.EnvStateID+"="+mark)
	}
	var env []string
	if j.spec.EnvMode != protocol.EnvReplace {
		for _, kv := range j.m.environ {
			k, _, _ := strings.Cut(kv, "=")
			if _, over := j.spec.Env[k]; !over && (mark == "" || !proc.IsMarkVar(k)) {
				env = append(env, kv)
			}
		}
	}
	for k, v := range j.spec.Env {
		if mark == "" || !proc.IsMarkVar(k) {
			env = append(env, k+"="+v)
		}
	}
	if mark != "" {
		env = append(env, proc.EnvJobID+"="+j.id, proc.EnvStateID+"="+mark)
	}
	return env
}

func envLookup(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// start launches the current run's process. On failure the run ends as a
// spawn-error (the job is finalized unless a service restarts it) and the
// error is returned.
func (j *Job) start() error {
	argv := j.spec.Argv
	if j.spec.Shell != "" {
		argv = []string{"/bin/sh", "-c", j.spec.Shell}
	}
	j.mu.Lock()
	attempt, runDone, runStarted := j.svc.attempt, j.runDone, j.runStarted
	service := j.isService()
	j.mu.Unlock()
	if h := j.m.hooks.BeforeServiceRun; h != nil && service && attempt > 1 {
		h(j.id)
	}
	env := j.buildEnv()
	var err error
	if j.spec.Notify {
		env, err = j.openNotify(env, runDone, runStarted)
	}
	var l *launch
	files := noFiles(false)
	if err == nil {
		l, files, err = j.prepare(argv, env)
	}
	if err == nil && j.m.cgroups != nil {
		// Born in its own cgroup (never moved after start): everything it
		// ever starts stays in it, whatever groups or sessions it makes.
		// An empty cgroup of a finished job is reused unless limits go on it.
		var cg *cgroups.Cgroup
		var cgfd int
		if cg, cgfd, err = j.m.cgroups.Acquire(j.hasCgroupLimits()); err == nil {
			j.applyCgroupLimits(cg)
			j.mu.Lock()
			j.run.cg = cg
			j.mu.Unlock()
			l.sys.UseCgroupFD = true
			l.sys.CgroupFD = cgfd
		}
	} else if err == nil {
		j.noCgroupLimits()
	}
	var p *child
	if err == nil {
		// The reaper must not see this leader's zombie before it is known.
		j.m.reapMu.RLock()
		p, err = l.start(j.m.pidfds, j.m.tickNanos.Load(), j.m.forkAround)
		if err != nil {
			err = fmt.Errorf("start %s: %w", quoteClip(argv[0]), err)
		} else {
			j.m.addLeader(p.pid)
		}
		j.m.reapMu.RUnlock()
	}
	// The child has its copies; ours of its ends must go so that EOF
	// arrives when the child's side closes. Except the output pipes' write
	// ends when runLoop waits for this run: it keeps them until the
	// process has exited (see runLoop).
	held := [2]int{-1, -1}
	if err == nil && j.runLoops(files, p) {
		held, files.outW = files.outW, [2]int{-1, -1}
	}
	files.closeChild()
	if err != nil {
		j.mu.Lock()
		cg := j.run.cg
		j.mu.Unlock()
		if cg != nil {
			_ = j.m.cgroups.Release(cg, true, time.Second) // nothing ever ran in it
			j.mu.Lock()
			j.run.cg = nil
			j.mu.Unlock()
		}
		files.closeParent()
		j.closeStdin()
		// (kept, logged and sent back: its message may quote input)
		err = clipErr(err)
		j.failSpawn(err)
		return err
	}

	if p.startTicks != 0 && !j.m.startTicksTrusted(p) {
		p.startTicks = 0
	}
	j.mu.Lock()
	j.run.proc = p
	j.run.pid = p.pid
	// The process fingerprint, when the boot clock gave it (else the
	// first snapshot of the running job reads it: fingerprintLocked).
	j.run.startTicks = p.startTicks
	j.run.pgid = p.pid // Setpgid with Pgid 0 (or Setsid): the leader's pid
	j.startedAt = j.m.now()
	j.lastOutputAt = j.startedAt
	started := j.applyLocked(j.stepLocked(lifecycle.Started{})) // (a kill asked for while starting follows)
	close(runStarted)
	ev := j.emitLocked(protocol.KindStarted, j.startedPayload(j.run.pid, j.attemptTag()))
	if j.evs.started == nil && ev.Seq == 1 {
		j.evs.started = &ev
	} else {
		// (a later run's; or a restored job's whose first start is not
		// known: Events keeps these in seq order among the others)
		j.keepExtraLocked(ev)
	}
	if j.timeout > 0 {
		j.run.overallT = time.AfterFunc(j.timeout, func() { j.killRun(runDone, protocol.ReasonOverallTimeout) })
	}
	if j.noOutput > 0 {
		j.run.idleT = time.AfterFunc(j.noOutput, func() { j.idleFired(runDone) })
	}
	if j.notify.watchdog > 0 {
		j.notify.watchdogT = time.AfterFunc(j.notify.watchdog, func() { j.watchdogFired(runDone) })
	}
	if j.m.logInfo() { // (the attributes cost allocations even when not logged)
		// Before its output and exit are read (so before they are
		// logged). (argv and cwd are client input of up to a request's
		// size: the line shows their beginning.)
		j.m.log.Info("job started", "job", j.id, "pid", j.run.pid, "argv", logArgv(argv), "cwd", Clip(j.spec.Cwd, LogArgBytes), "attempt", attempt,
			"timeout", j.timeout, "noOutputTimeout", j.noOutput)
	}
	j.run.readersDone = make(chan struct{})
	if j.runLoops(files, p) {
		// One goroutine reads both pipes and reaps it (see runLoop).
		out := files.out
		j.m.wg.Add(1)
		j.m.runners.run(func() { j.runLoop(p, out, held) })
	} else {
		readers := files.parent // a terminal's master: stream 0
		if files.pipes {
			readers = []*os.File{newOutFile(files.out[0], 0), newOutFile(files.out[1], 1)}
		}
		j.startReaders(readers)
		j.m.wg.Add(1)
		j.m.runners.run(j.waitLoop)
	}
	if j.run.cg != nil {
		j.m.watchEscapes(j, runDone)
	}
	j.mu.Unlock()
	if h := j.m.hooks.Started; h != nil {
		h(j)
	}
	started()
	return nil
}

// attemptTag is the attempt number events carry: the run number for
// service jobs, 0 (absent) for one-shot jobs.
func (j *Job) attemptTag() int {
	if !j.isService() {
		return 0
	}
	return j.svc.attempt
}

// killRun ends the run whose runDone is given with reason, unless that
// run is already over (a timer of an old run firing late).
func (j *Job) killRun(runDone <-chan struct{}, reason Reason) {
	_, _ = j.kill(runDone, reason, 0)
}

func ptr[T any](v T) *T { return &v }
