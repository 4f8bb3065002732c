package jobs

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
	"golang.org/x/sys/unix"
)

// jobRun is the current run's process and what watches it: its
// cgroup, its output readers, its timers and how its kill escalates.
// Reset for a service's next run (beginRunLocked). Guarded by
// Job.mu; the run's own goroutines (runLoop, readLoop, waitLoop and what
// follows the reaping) read what does not change during the run
// without it: proc, pgid, cg, rfiles, readersDone, killNow.
type jobRun struct {
	proc       *child
	pid, pgid  int
	startTicks uint64

	// cg is the job's cgroup (nil without cgroup support).
	cg      *cgroups.Cgroup
	escaped bool // an ownership escape was reported

	// limits is what the current run's limits info reports (see
	// recordLimits).
	limits *protocol.LimitsInfo

	// readersLeft counts the run's output readers still reading; the last
	// one closes readersDone.
	readersLeft atomic.Int32
	readersDone chan struct{}
	rfiles      []*os.File

	// overallT and idleT end the run at its overall and its no-output
	// timeout (see start).
	overallT *time.Timer
	idleT    *time.Timer

	// killDeadline is when SIGKILL follows the first kill.
	killDeadline time.Time
	killNow      chan struct{} // closed to escalate to SIGKILL at once

	// leaderWS is how a one-shot job's leader ended, while the rest of
	// its group is terminated (journaled: see journal.Record.LeaderExit).
	leaderWS *syscall.WaitStatus
}

// waitLoop waits for the process of a run read by readLoops (a
// terminal's, or one without a pidfd), then finishes the run
// (afterReap). Each run's process is waited for in one place: here or in
// runLoop.
func (j *Job) waitLoop() {
	defer j.m.wg.Done()
	p := j.run.proc // (a service's next run gets a proc of its own)
	ws, err := p.wait()
	j.afterReap(p, ws, err)
}

// runLoops reports whether a run started with files as p is read and
// waited for by runLoop: its output is in pipes and it has a pidfd.
func (j *Job) runLoops(files procFiles, p *child) bool {
	return files.pipes && p.pidfd != nil && !j.m.noRunLoop
}

// runLoop is the one goroutine of a run with output pipes and a pidfd:
// it reads both pipes as they become readable and reaps the process once
// its pidfd does, waiting for all three at once in the netpoller (see
// pollSet), then finishes the run as waitLoop does. Against two readers
// and a waiter, a job that prints little costs no goroutine hand-offs
// (each of which woke an idle thread: measured as what most of the
// supervisor's time per /bin/true went to), and no *os.File per pipe.
//
// A round reads at most one pipe's worth per stream, so that a stream
// that never runs dry (a descendant flooding it) neither keeps the other
// stream waiting nor the exit from being seen. Pipes still open once the
// process has exited and what it wrote before has been read (a descendant
// holds them) go to readLoops, which read on while the rest of the group
// is cleared, and drain waits for them as it does for any run.
//
// held are our copies of the pipes' write ends, kept open until the
// process has exited (or the pipes are handed off): the end of a process
// closes its descriptors before it makes its pidfd readable, so without
// them each exit woke it three times (each pipe's end, then the exit),
// each time taking the CPU from the exiting process, where with them it
// wakes once, to find the pipes ended already.
func (j *Job) runLoop(p *child, out, held [2]int) {
	defer j.m.wg.Done()
	release := func() {
		for i, fd := range held {
			if fd >= 0 {
				syscall.Close(fd)
				held[i] = -1
			}
		}
	}
	defer release()
	pidfd := p.rawfd
	fds := [3]unix.PollFd{
		{Fd: int32(out[0]), Events: unix.POLLIN},
		{Fd: int32(out[1]), Events: unix.POLLIN},
		{Fd: int32(pidfd), Events: unix.POLLIN},
	}
	open := 2
	closeOut := func(i int) {
		syscall.Close(out[i])
		out[i], fds[i].Fd = -1, -1 // (poll skips a negative fd)
		open--
	}
	// done closes the pollSet once it is of no more use (not left open,
	// woken by the readers' pipes, through the group's clearing).
	var ps *pollSet
	done := func() {
		if ps != nil {
			ps.close()
			ps = nil
		}
	}
	defer done()
	// handOff gives the pipes still open to readLoops (which close
	// readersDone when they are done).
	handedOff := false
	handOff := func() {
		done()
		release() // (else they never end)
		handedOff = true
		var files [2]*os.File
		for i := range 2 {
			if out[i] >= 0 {
				files[i] = newOutFile(out[i], i)
				out[i], fds[i].Fd = -1, -1
			}
		}
		j.startReaders(files[:])
	}
	err := j.m.pollSetErr // (tests)
	if err == nil {
		ps, err = newPollSet(fds[:])
	}
	if err != nil {
		// (EMFILE, say.) The netpoller's readers take the pipes; the wait
		// below reaps the process.
		msg := "wait for job output and exit; reading it through readers (later failures are logged at debug level)"
		if j.m.pollSetFailed.Swap(true) {
			j.m.log.Debug(msg, "job", j.id, "err", err)
		} else {
			j.m.log.Error(msg, "job", j.id, "err", err)
		}
		handOff()
	}
	polling := !handedOff
	for polling {
		if j.gated() {
			// Output held (see gatedLocked): the readLoops wait at the
			// gate, the exit is waited for below.
			handOff()
			break
		}
		if err := ps.wait(fds[:]); err != nil {
			// (ENOMEM, in practice.) The netpoller's readers take the
			// pipes; the wait below reaps the process.
			j.m.log.Error("poll job output; reading it through readers", "job", j.id, "err", err)
			handOff()
			break
		}
		for i := range 2 {
			if fds[i].Fd >= 0 && fds[i].Revents != 0 && j.readAvailable(i, out[i], pipeRound) {
				closeOut(i)
			}
		}
		// (pidfd readable: it exited; both pipes at EOF: it closed
		// them, only its exit is left to wait for.)
		polling = fds[2].Revents == 0 && open > 0
	}
	release() // (its exit, or a hand-off, was seen: what follows reads to EOF)
	if !handedOff {
		exited := fds[2].Revents != 0
		if !exited {
			// The pipes ended first: the exit is waited for in poll too,
			// so that the job knows its leader exited before it is reaped.
			pidOnly := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			exited = ps.wait(pidOnly) == nil && pidOnly[0].Revents != 0
		}
		done()
		if exited {
			// A zombie now: its pid (and so the group number) is still
			// taken. From here on a kill signals a cgroup job through its
			// cgroup only: once reaped, the group number may be anyone's.
			j.mu.Lock()
			j.stepLocked(lifecycle.LeaderExited{})
			j.openGateLocked()
			j.mu.Unlock()
		}
	}
	ws, err := p.wait()
	if !handedOff {
		// What it wrote before it exited is in the pipes (at most a
		// pipe's worth each; more means a descendant is writing).
		for i := range 2 {
			if out[i] >= 0 && j.readAvailable(i, out[i], pipeRound) {
				closeOut(i)
			}
		}
		if open > 0 {
			handOff()
		} else {
			close(j.run.readersDone)
		}
	}
	j.afterReap(p, ws, err)
}

// pipeRound bounds what runLoop reads of one stream per round: a pipe's
// default capacity.
const pipeRound = 64 << 10

// readAvailable reads stream i's pipe (non-blocking descriptor fd) until
// it would block or max bytes have been read, as readLoop does; it
// reports true at EOF or on an error (the stream is over).
func (j *Job) readAvailable(i, fd, max int) bool {
	for n := 0; n < max; {
		buf, start := j.readBuf(i)
		k, err := unix.Read(fd, buf[start:cap(buf)])
		if k > 0 {
			j.output(i, buf, start, k)
			n += k
			continue
		}
		switch err {
		case unix.EAGAIN:
			return false
		case unix.EINTR:
			continue
		case nil: // EOF
		default:
			j.m.log.Warn("read job output", "job", j.id, "stream", string(streams[i]), "err", err)
		}
		return true
	}
	return false
}

// afterReap is what follows the reaping of the run's process (p, exit
// status ws): what is left of its scope is cleared, the output drained,
// the run finalized.
func (j *Job) afterReap(p *child, ws syscall.WaitStatus, err error) {
	j.m.removeLeader(p.pid)
	if err != nil {
		j.m.log.Error("wait for job", "job", j.id, "err", err)
	}
	j.mu.Lock()
	j.stepLocked(lifecycle.LeaderExited{})
	j.openGateLocked()
	killing, deadline, cg, runDone := j.life.Killing, j.run.killDeadline, j.run.cg, j.runDone
	j.mu.Unlock()

	// Usually nothing is left once the leader is gone: one check of the
	// scope then (no escape can hide in an empty cgroup).
	empty := true
	if j.scopeAlive() {
		if !j.isService() {
			// Ending the rest may take the grace period: how the leader
			// ended is journaled meanwhile, so that a supervisor crash
			// then does not lose it.
			j.mu.Lock()
			j.run.leaderWS = &ws
			j.mu.Unlock()
			j.m.changed()
		}
		j.detectEscapes(runDone)
		empty = j.clearGroup(killing, deadline)
	} else {
		j.markGroupGone()
	}
	j.drain()
	sock := j.finalize(ws)
	// The pidfd is closed after the exit event is out (unreaped is not
	// asked once leaderExited is set; a signal through it after the reap
	// fails, it cannot reach another process).
	p.release()
	closeNotify(sock)
	// The cgroup is empty (clearGroup waited for it); removing it need
	// not delay the job's end. (A service's next run has its own.)
	if cg != nil {
		if err := j.m.cgroups.Release(cg, empty, CgroupReleaseBound); err != nil {
			j.m.log.Error("job cgroup not removed", "job", j.id, "err", err)
		}
	}
}

// CgroupReleaseBound is how long an ended job's waiter waits for its
// cgroup to be empty before removing it: a supervisor shutting down
// waits as long for its job cgroups to go before it removes their base.
const CgroupReleaseBound = 5 * time.Second

// clearGroup terminates descendants that outlived the leader: a job owns
// its whole process group, and nothing it started may live on unowned. It
// reports whether the scope was seen empty.
func (j *Job) clearGroup(killing bool, deadline time.Time) bool {
	if j.m.reaping {
		// Members that lost their parent are the subreaper's children:
		// once the group is gone, their zombies are reaped at once, not
		// at the reaper's next pass. (Zombies never count as alive.)
		defer j.m.reapZombies()
	}
	if !j.scopeAlive() {
		j.markGroupGone()
		return true
	}
	if !killing {
		j.m.log.Info("job leader exited; terminating the rest of its process group", "job", j.id, "pgid", j.run.pgid)
		j.mu.Lock()
		_ = j.signalLocked(syscall.SIGTERM)
		_ = j.signalLocked(syscall.SIGCONT) // (as in kill)
		j.mu.Unlock()
		deadline = j.m.now().Add(j.grace)
	}
	if !proc.WaitGone(j.scopeAlive, time.Until(deadline), j.run.killNow) {
		j.mu.Lock()
		after := j.applyLocked(j.stepLocked(lifecycle.GroupOutlived{}))
		j.mu.Unlock()
		after()
		if !proc.WaitGone(j.scopeAlive, 5*time.Second, nil) {
			j.m.log.Error("process group survived SIGKILL", "job", j.id, "pgid", j.run.pgid)
			j.markGroupGone()
			return false
		}
	}
	j.markGroupGone()
	return true
}

func (j *Job) markGroupGone() {
	j.mu.Lock()
	j.stepLocked(lifecycle.GroupGone{})
	j.mu.Unlock()
}

// waitGroupGone waits until group pgid is empty, for at most d or until
// stop is closed.
func waitGroupGone(pgid int, d time.Duration, stop <-chan struct{}) bool {
	return proc.WaitGone(func() bool { return proc.GroupAlive(pgid) }, d, stop)
}

// drain waits for the output readers to reach EOF. A process that escaped
// the group may hold a pipe open; after DrainTimeout the pipes are closed.
func (j *Job) drain() {
	j.mu.Lock()
	ch := j.run.readersDone
	j.mu.Unlock()
	select {
	case <-ch: // the usual case: EOF came with the exit
		for _, f := range j.run.rfiles {
			f.Close()
		}
		return
	default:
	}
	t := time.NewTimer(j.m.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		j.m.log.Warn("job output pipes still open after its process group ended (a process escaped the group); closing them", "job", j.id)
		for _, f := range j.run.rfiles {
			f.Close()
		}
		<-ch
	}
	for _, f := range j.run.rfiles {
		f.Close()
	}
}
