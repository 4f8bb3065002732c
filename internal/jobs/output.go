package jobs

import (
	"os"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/outlog"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// jobOutput is a job's event and output stream: how its events are
// numbered, the ring that retains them, the files that keep its output
// on disk, and the output read but not yet published (merged into
// events per stream: see mergeLocked). Guarded by Job.mu; disk is set
// before the job is visible and never changed.
type jobOutput struct {
	seq  uint64
	ring *ring

	// disk writes the job's output to its files (nil: memory only; set
	// before the job is visible, never changed); diskErr is why it could
	// not be opened.
	disk    *outlog.Writer
	diskErr string
	offset  int64 // combined output offset of the next byte
	streamN [2]int64
	pending [2][]byte
	flushT  [2]*time.Timer

	// flushedAt is when each stream's output last became an event (zero:
	// never): output read a whole merge window after it goes out at once
	// (see mergeLocked).
	flushedAt [2]time.Time

	// pendingSince orders the streams' pending output by when its first
	// byte was read (from pendingN): flushes go oldest first, so that the
	// output's order across streams is the order it was read in.
	pendingSince [2]uint64
	pendingN     uint64
}

func (j *Job) readLoop(i int, f *os.File, done chan struct{}) {
	defer j.m.wg.Done()
	defer func() {
		if j.run.readersLeft.Add(-1) == 0 {
			close(done)
		}
	}()
	for {
		j.awaitGate()
		buf, start := j.readBuf(i)
		n, err := f.Read(buf[start:cap(buf)])
		if n > 0 {
			j.output(i, buf, start, n)
		}
		if err != nil {
			if !j.in.isPTY {
				// Closed here, off the way from the exit to the exit
				// event (drain's Close is then free). A terminal's
				// master also carries input: drain closes it.
				f.Close()
			}
			return
		}
	}
}

// readBuf returns stream i's merge buffer and where the next read goes
// in it: output is read straight into it, behind the room for the event
// header, so that a busy stream's output becomes event payloads without
// being copied.
func (j *Job) readBuf(i int) (buf []byte, start int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	buf = j.out.pending[i]
	if buf == nil {
		buf = j.m.getOutBuf()
		j.out.pending[i] = buf
	}
	if len(buf) == cap(buf) { // full (flushes happen before): hand it on
		j.flushInOrderLocked(i)
		if buf = j.out.pending[i]; buf == nil {
			buf = j.m.getOutBuf()
			j.out.pending[i] = buf
		}
	}
	return buf, len(buf)
}

// output takes n bytes that a read put at buf[start:] (buf being stream
// i's merge buffer when the read began).
func (j *Job) output(i int, buf []byte, start, n int) {
	if h := j.m.hooks.OutputBytes; h != nil {
		h(streams[i], n)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	cur := j.out.pending[i]
	if cur != nil && len(cur) == start && &cur[:cap(cur)][0] == &buf[:cap(buf)][0] {
		cur = cur[:start+n]
	} else {
		// The merge timer flushed while this read ran: the new bytes sit
		// behind output already sent; move them into a buffer of their own.
		if cur == nil {
			cur = j.m.getOutBuf()
		}
		cur = append(cur, buf[start:start+n]...)
	}
	j.out.pending[i] = cur
	if len(cur)-protocol.OutputHeadroom == n { // the first since the last flush
		j.out.pendingN++
		j.out.pendingSince[i] = j.out.pendingN
	}
	p := cur[len(cur)-n:]
	now := j.m.now()
	j.lastOutputAt = now
	j.out.streamN[i] += int64(n)
	if j.run.idleT != nil && j.life.State != Exited {
		j.run.idleT.Reset(j.noOutput)
	}
	if j.in.isPTY {
		j.trackBracketedPasteLocked(p)
	}
	j.mergeLocked(i, now)
}

// mergeLocked decides when stream i's pending output (just added to at
// now) becomes an event. Output that follows a quiet stream (nothing
// flushed for a whole merge window) goes out at once: a job's first
// line, or a line after a pause, reaches subscribers without waiting.
// Output that follows within the window waits for the window's end,
// counted from the last flush: a chatty stream makes at most one event
// per window (and one per MergeMaxBytes), however often it writes.
func (j *Job) mergeLocked(i int, now time.Time) {
	window := j.m.cfg.MergeInterval
	since := now.Sub(j.out.flushedAt[i])
	if len(j.out.pending[i])-protocol.OutputHeadroom >= j.m.cfg.MergeMaxBytes || window <= 0 || since >= window {
		j.flushInOrderLocked(i)
		return
	}
	if j.out.flushT[i] != nil {
		return // (the window's end is already due)
	}
	var t *time.Timer
	t = time.AfterFunc(min(window-since, window), func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.out.flushT[i] != t {
			return // (stopped too late: a flush came first)
		}
		j.out.flushT[i] = nil
		j.flushInOrderLocked(i)
	})
	j.out.flushT[i] = t // (under j.mu, which the timer's function takes first)
}

// FlushOutput publishes the output still in the merge windows now
// (oldest stream first), as events: what the job printed is then
// retained and published however soon its windows would have ended.
func (j *Job) FlushOutput() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.flushInOrderLocked(0) // (both, oldest first)
	j.flushLocked(1)
}

// flushInOrderLocked flushes stream i, after the other stream if that
// one's pending output was read first.
func (j *Job) flushInOrderLocked(i int) {
	if o := 1 - i; len(j.out.pending[o]) > protocol.OutputHeadroom && j.out.pendingSince[o] < j.out.pendingSince[i] {
		j.flushLocked(o)
	}
	j.flushLocked(i)
}

// flushLocked turns stream i's pending output into one event (of at most
// MergeMaxBytes). A large one is sent without a copy: its buffer becomes
// the event's payload (and the ring's chunk) and the stream gets a new
// one; a small one is copied into an event of its own size, and the
// buffer is reused.
func (j *Job) flushLocked(i int) {
	if j.life.State == Exited {
		return
	}
	if t := j.out.flushT[i]; t != nil {
		t.Stop()
		j.out.flushT[i] = nil
	}
	cur := j.out.pending[i]
	n := len(cur) - protocol.OutputHeadroom
	if n <= 0 {
		return
	}
	j.nextSeqLocked()
	now := j.m.now()
	var ev protocol.Event
	if n >= j.m.cfg.MergeMaxBytes/2 {
		ev = protocol.NewOutputEventInPlace(j.id, j.out.seq, ms(now), streams[i].Kind(), j.out.offset, cur)
		j.out.pending[i] = nil
	} else {
		ev = protocol.NewOutputEvent(j.id, j.out.seq, ms(now), streams[i].Kind(), j.out.offset, cur[protocol.OutputHeadroom:])
		j.out.pending[i] = cur[:protocol.OutputHeadroom]
	}
	ev.Attempt = j.attemptTag()
	if j.m.sink != nil {
		j.m.sink.Publish(ev)
	}
	// The ring's chunk aliases the payload's tail: the only copy kept.
	stored := ev.Payload[len(ev.Payload)-n:]
	j.storeLocked(chunk{Chunk: protocol.Chunk{Seq: ev.Seq, Stream: streams[i], Offset: j.out.offset, Data: stored}, ts: ev.Ts, payload: ev.Payload, attempt: ev.Attempt})
	j.out.offset += int64(n)
	j.out.flushedAt[i] = now
	j.checkReserveLocked()
}

func (j *Job) idleFired(runDone <-chan struct{}) {
	j.mu.Lock()
	if j.life.State != Running || over(runDone) {
		j.mu.Unlock()
		return
	}
	if j.hold.gate != nil {
		// Output held (journal, pacing): the job waits for us, it is not
		// quiet. Counted again from when it is read.
		j.run.idleT.Reset(j.noOutput)
		j.mu.Unlock()
		return
	}
	if quiet := j.m.now().Sub(laterOf(j.lastOutputAt, j.hold.unheldAt)); quiet < j.noOutput {
		// Output arrived while the timer fired: re-arm for the rest.
		j.run.idleT.Reset(j.noOutput - quiet)
		j.mu.Unlock()
		return
	}
	j.mu.Unlock()
	j.killRun(runDone, protocol.ReasonNoOutputTimeout)
}
