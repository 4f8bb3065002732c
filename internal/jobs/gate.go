package jobs

import (
	"time"
)

// gateSeq and gateOff are where the reserve gate closes: three quarters
// of a reserve used since the last journal write that landed. A write
// was asked for at a quarter; a healthy journal lands it within a
// fraction of a second, so only a journal that cannot be written (a full
// disk) lets a job get here.
const (
	gateSeq = seqReserve / 4 * 3
	gateOff = offsetReserve / 4 * 3
)

// gatedLocked says whether the job's output must not be read now: the
// journal lags too far behind (journalHeldLocked), or a client pacing
// the job has not taken its output that far (pacedLocked). Reading goes
// on once neither holds, or once the run's leader has exited (what is
// left to read then is bounded: the pipes' contents and what the group
// writes before it is cleared).
func (j *Job) gatedLocked() bool {
	return !j.life.LeaderExited && (j.journalHeldLocked() || j.pacedLocked() || j.diskBehindLocked())
}

// journalHeldLocked says whether output must wait for the journal: a
// successor that finds the job in the journal numbers its later events
// and output from seqSnap+seqReserve and offSnap+offsetReserve on (see
// Restore), so the job must never publish that far while the journal
// cannot be written. Its output is held instead: the child blocks on its
// full pipe or terminal, as under any slow reader, and nothing is lost.
// Reading goes on when a journal write lands (Journaled).
func (j *Job) journalHeldLocked() bool {
	return j.onDisk && (j.seq >= j.seqSnap+gateSeq || j.offset >= j.offSnap+gateOff)
}

// gated is gatedLocked for a caller without the lock.
func (j *Job) gated() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.gatedLocked()
}

// laterOf returns the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// awaitGate returns once the job's output may be read (see gatedLocked).
func (j *Job) awaitGate() {
	j.mu.Lock()
	defer j.mu.Unlock()
	for j.gatedLocked() {
		if j.gate == nil {
			j.gate = make(chan struct{})
		}
		j.noteHeldLocked()
		j.armPaceStallLocked()
		g := j.gate
		j.mu.Unlock()
		<-g
		j.mu.Lock()
	}
}

// openGateLocked lets held output be read again once it may be (and
// otherwise keeps what is reported of why it is held right).
func (j *Job) openGateLocked() {
	if j.gate == nil {
		return
	}
	if j.gatedLocked() {
		j.noteHeldLocked()
		j.armPaceStallLocked() // (a pacer may hold it now: it did not when the gate closed)
		return
	}
	close(j.gate)
	j.gate = nil
	if j.paceTimer != nil {
		j.paceTimer.Stop()
		j.paceTimer = nil
	}
	for _, p := range j.pacers {
		p.holdingSince = time.Time{} // (nobody holds an open gate: a service's next run starts the clock afresh)
	}
	j.unheldAt = j.m.now()
	j.noteHeldLocked()
}

// noteHeldLocked reports (log, OutputHeld hook, status) whether held
// output is held for the journal, when that changed.
func (j *Job) noteHeldLocked() {
	held := j.gate != nil && j.journalHeldLocked()
	if held == j.heldJournal {
		return
	}
	j.heldJournal = held
	if held {
		j.m.log.Warn("job output held: the journal has not been written for too long (disk full?); the job blocks on its output until a write lands",
			"job", j.id, "seq", j.seq, "journaledSeq", j.seqSnap, "outputEnd", j.offset, "journaledOutputEnd", j.offSnap)
	} else {
		j.m.log.Info("job output read again", "job", j.id, "journaledSeq", j.seqSnap, "leaderExited", j.life.LeaderExited)
	}
	if h := j.m.hooks.OutputHeld; h != nil {
		h(held)
	}
}

// nextSeqLocked numbers the job's next event.
func (j *Job) nextSeqLocked() {
	j.seq++
	j.checkReserveLocked()
}

// checkReserveLocked asks for a journal write when a quarter of the seq
// or offset reserve is used.
func (j *Job) checkReserveLocked() {
	if !j.reserveAsked && (j.seq >= j.seqSnap+seqReserve/4 || j.offset >= j.offSnap+offsetReserve/4) {
		j.reserveAsked = true
		if h := j.m.hooks.Changed; h != nil {
			h() // (never blocks)
		}
	}
}
