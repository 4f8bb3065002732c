package jobs

import (
	"time"
)

// jobPacing is the clients that pace a job's output (see Pace), and the
// timer that lets a stalled one go. Guarded by Job.mu.
type jobPacing struct {
	// pacers are the clients that pace the job's output (see Pace).
	pacers map[any]*pacer

	// timer, while output waits for a pacer, fires when the longest
	// silent pacer has stalled (see paceStalled).
	timer *time.Timer
	gen   uint64 // (which timer a firing is of)
}

// pacer is a client pacing a job's output: it has taken the output up to
// acked, and the job's output is read no further than acked + the pace
// window (see Pace). stop ends the watch that releases it.
type pacer struct {
	acked int64
	// holdingSince is when the job was first seen waiting for this pacer
	// since acked last moved (zero: not holding it): a pacer that holds
	// the job for PaceStallLimit without taking more has stalled (see
	// armPaceStallLocked). A quiet job's pacer holds nothing, however
	// long since it last took output.
	holdingSince time.Time
	stop         func() bool
}

// PaceWindow is how far past what its slowest pacer took a paced job's
// output is read, at most: half the ring buffer, so that all of it is
// still retained for a pacer that missed it live (its event connection
// cut, say) and backfills. Less for a job whose output comes in small
// events (see paceWindowLocked).
func (m *Manager) PaceWindow() int64 { return int64(m.cfg.RingBytes / 2) }

// minPaceWindow is the least a paced job is let run ahead of its pacer.
const minPaceWindow = 4 << 10

// paceWindowLocked is PaceWindow in output bytes the ring can actually
// hold: its budget counts each event's encoding and bookkeeping too, so
// a job printing in small events fits less output in it (a 1-byte event
// costs ~130 bytes). Scaled by what the retained output costs.
func (j *Job) paceWindowLocked() int64 {
	w := j.m.PaceWindow()
	if r := j.out.ring; r.cost > 0 && r.bytes < r.cost {
		w = int64(float64(w) * float64(r.bytes) / float64(r.cost))
	}
	return max(w, min(minPaceWindow, j.m.PaceWindow()/2))
}

// pacedLocked says whether a pacer holds the job's output.
func (j *Job) pacedLocked() bool {
	if len(j.pace.pacers) == 0 {
		return false
	}
	w := j.paceWindowLocked()
	for _, p := range j.pace.pacers {
		if j.heldByLocked(p, w) {
			return true
		}
	}
	return false
}

// heldByLocked says whether pacer p holds the job (window w): the job
// read a window past what p took.
func (j *Job) heldByLocked(p *pacer, w int64) bool { return j.out.offset >= p.acked+w }

// Pace makes owner (a client connection, say) pace the job's output, or
// moves its pace on: owner has taken the output up to offset, and the
// job's output is read no further than offset + the pace window (see
// paceWindowLocked) until owner takes more, as a pipe's writer waits for its reader (nothing is lost,
// the child waits). When owner is new, watch (if not nil) is called with
// a function that releases owner, for when owner goes away; it returns
// a function that ends that watch (called when owner is released). A
// finished job has nothing to pace (no error). Release with Unpace.
func (j *Job) Pace(owner any, offset int64, watch func(release func()) (stop func() bool)) error {
	if offset < 0 {
		return errorf(ErrInvalid, "offset %d is negative", offset)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.life.State == Exited {
		return nil
	}
	// (offsets a resumed service skipped hold nothing to take)
	if n := len(j.out.ring.skips); n > 0 {
		offset = max(offset, j.out.ring.skips[n-1].At+j.out.ring.skips[n-1].N)
	}
	// Nobody took more than was read: an offset past it (a client's
	// mistake) would hold the job at a window it can never reach, and no
	// later pace could move it back.
	offset = min(offset, j.out.offset)
	p := j.pace.pacers[owner]
	if p == nil {
		if j.pace.pacers == nil {
			j.pace.pacers = map[any]*pacer{}
		}
		p = &pacer{acked: offset}
		j.pace.pacers[owner] = p
		if watch != nil {
			p.stop = watch(func() { j.Unpace(owner) })
		}
	}
	if offset > p.acked {
		p.acked, p.holdingSince = offset, time.Time{}
	}
	j.openGateLocked()
	return nil
}

// armPaceStallLocked makes sure a pacer that holds the job is let go once
// it has taken nothing for PaceStallLimit (see paceStalled): called while
// the job's output waits for a pacer.
func (j *Job) armPaceStallLocked() {
	limit := j.m.cfg.PaceStallLimit
	if limit <= 0 || j.hold.gate == nil {
		return
	}
	// Which pacers hold the job now, since when; the timer is for the
	// one holding it longest.
	now, w := j.m.now(), j.paceWindowLocked()
	var first time.Time
	for _, p := range j.pace.pacers {
		if !j.heldByLocked(p, w) {
			p.holdingSince = time.Time{}
			continue
		}
		if p.holdingSince.IsZero() {
			p.holdingSince = now
		}
		if first.IsZero() || p.holdingSince.Before(first) {
			first = p.holdingSince
		}
	}
	if first.IsZero() || j.pace.timer != nil {
		return // (none holds it; or a timer is due no later than this one)
	}
	j.pace.gen++
	gen := j.pace.gen
	j.pace.timer = time.AfterFunc(max(first.Add(limit).Sub(j.m.now()), 0), func() { j.paceStalled(gen) })
}

// paceStalled releases the pacers that hold the job and have taken
// nothing for PaceStallLimit: a follower that stopped reading (a
// suspended terminal, a wedged client) holds a job for that long at most,
// whoever's the job is. Logged and counted; the follower finds out
// through the output it then misses (a gap), never silently.
func (j *Job) paceStalled(gen uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if gen != j.pace.gen || j.hold.gate == nil {
		return // (a timer stopped too late, or the gate opened meanwhile)
	}
	j.pace.timer = nil
	limit, now, w := j.m.cfg.PaceStallLimit, j.m.now(), j.paceWindowLocked()
	for owner, p := range j.pace.pacers {
		if !j.heldByLocked(p, w) || p.holdingSince.IsZero() || now.Sub(p.holdingSince) < limit {
			continue
		}
		delete(j.pace.pacers, owner)
		if p.stop != nil {
			p.stop()
		}
		j.m.log.Warn("job pacer let go: it took none of the job's output for too long (--pace-stall-limit); the job runs on, and what leaves the ring before that follower reads it is a gap for it",
			"job", j.id, "took", p.acked, "outputEnd", j.out.offset, "stalledFor", now.Sub(p.holdingSince).Round(time.Millisecond))
		if h := j.m.hooks.PaceStalled; h != nil {
			h()
		}
	}
	j.openGateLocked()
	if j.hold.gate != nil {
		j.armPaceStallLocked()
	}
}

// Unpace releases owner's pace of the job (a no-op when it has none).
func (j *Job) Unpace(owner any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if p := j.pace.pacers[owner]; p != nil {
		delete(j.pace.pacers, owner)
		if p.stop != nil {
			p.stop()
		}
		j.openGateLocked()
	}
}

// clearPacersLocked releases every pacer (the job is over).
func (j *Job) clearPacersLocked() {
	for owner, p := range j.pace.pacers {
		delete(j.pace.pacers, owner)
		if p.stop != nil {
			p.stop()
		}
	}
	j.openGateLocked()
}
