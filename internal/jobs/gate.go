package jobs

import (
	"time"
)

// jobJournal is what the journal holds of a job, and the reserve of
// seqs and offsets that follows from it (see seqReserve): the job's
// output is held once it nears the end of that reserve (see
// journalHeldLocked). Guarded by Job.mu; set by Journaled.
type jobJournal struct {
	// seqSnap is the job's last seq in the journal as last written (its
	// record reserves seqs up to seqSnap+seqReserve; see Journaled), and
	// offSnap its output end (offsets up to offSnap+offsetReserve);
	// reserveAsked is set once a new write was asked for.
	seqSnap      uint64
	offSnap      int64
	reserveAsked bool

	// onDisk is set once a record of the job reached the journal (see
	// Journaled; a restored job came from one): only then does a
	// successor number past seqSnap and offSnap, and only then is output
	// held at the reserve gate.
	onDisk bool
}

// seqReserve is how far past a running job's last journaled seq its
// events may be numbered before the journal is written again: a
// supervisor that dies in between may have published events up to there,
// and its successor (Restore of an interrupted job) numbers the job's
// later events past them. A journal write is asked for when a quarter of
// the reserve is used, long before it runs out.
const seqReserve = 100_000

// offsetReserve is to output offsets what seqReserve is to seqs: a
// service resumed after its supervisor died writes its output from the
// journaled output end plus offsetReserve on (see Restore), past every
// byte the dead supervisor may have published. A journal write is asked
// for once a quarter of it was printed since the last one: the rest (768
// MiB) is what the job may print before that write lands.
const offsetReserve = 1 << 30

// jobHold is the gate at which a job's output waits while it must not
// be read (for the journal, a pacer or the disk writer: see
// gatedLocked). Guarded by Job.mu.
type jobHold struct {
	// gate, while output is held (see gatedLocked), is closed when it may
	// be read again (see awaitGate).
	gate chan struct{}

	// forJournal: output is held for the journal (gatedLocked), as
	// reported (OutputHeld hook, outputHeld in status).
	forJournal bool

	// unheldAt is when held output was last let go: the no-output
	// watchdog counts from it too (a held job was not quiet).
	unheldAt time.Time
}

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
	return j.journal.onDisk && (j.out.seq >= j.journal.seqSnap+gateSeq || j.out.offset >= j.journal.offSnap+gateOff)
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
		if j.hold.gate == nil {
			j.hold.gate = make(chan struct{})
		}
		j.noteHeldLocked()
		j.armPaceStallLocked()
		g := j.hold.gate
		j.mu.Unlock()
		<-g
		j.mu.Lock()
	}
}

// openGateLocked lets held output be read again once it may be (and
// otherwise keeps what is reported of why it is held right).
func (j *Job) openGateLocked() {
	if j.hold.gate == nil {
		return
	}
	if j.gatedLocked() {
		j.noteHeldLocked()
		j.armPaceStallLocked() // (a pacer may hold it now: it did not when the gate closed)
		return
	}
	close(j.hold.gate)
	j.hold.gate = nil
	if j.pace.timer != nil {
		j.pace.timer.Stop()
		j.pace.timer = nil
	}
	for _, p := range j.pace.pacers {
		p.holdingSince = time.Time{} // (nobody holds an open gate: a service's next run starts the clock afresh)
	}
	j.hold.unheldAt = j.m.now()
	j.noteHeldLocked()
}

// noteHeldLocked reports (log, OutputHeld hook, status) whether held
// output is held for the journal, when that changed.
func (j *Job) noteHeldLocked() {
	held := j.hold.gate != nil && j.journalHeldLocked()
	if held == j.hold.forJournal {
		return
	}
	j.hold.forJournal = held
	if held {
		j.m.log.Warn("job output held: the journal has not been written for too long (disk full?); the job blocks on its output until a write lands",
			"job", j.id, "seq", j.out.seq, "journaledSeq", j.journal.seqSnap, "outputEnd", j.out.offset, "journaledOutputEnd", j.journal.offSnap)
	} else {
		j.m.log.Info("job output read again", "job", j.id, "journaledSeq", j.journal.seqSnap, "leaderExited", j.life.LeaderExited)
	}
	if h := j.m.hooks.OutputHeld; h != nil {
		h(held)
	}
}

// nextSeqLocked numbers the job's next event.
func (j *Job) nextSeqLocked() {
	j.out.seq++
	j.checkReserveLocked()
}

// checkReserveLocked asks for a journal write when a quarter of the seq
// or offset reserve is used.
func (j *Job) checkReserveLocked() {
	if !j.journal.reserveAsked && (j.out.seq >= j.journal.seqSnap+seqReserve/4 || j.out.offset >= j.journal.offSnap+offsetReserve/4) {
		j.journal.reserveAsked = true
		if h := j.m.hooks.Changed; h != nil {
			h() // (never blocks)
		}
	}
}
