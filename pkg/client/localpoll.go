package client

import (
	"context"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// localPolls is push mode's Poll: a job polled is followed in the
// background (Follow, on an event connection of its own) into a local
// buffer, which later polls of it read without asking the supervisor.
// At most max jobs are followed at once (the least recently polled one
// makes room); one not polled for watchIdle is let go.
type localPolls struct {
	c     *Client
	max   int // jobs followed at once (0: none, Poll always asks)
	bytes int // output kept per job

	mu      sync.Mutex
	w       map[string]*watch
	closed  bool
	janitor bool          // sweep runs
	quit    chan struct{} // closed by close
	wg      sync.WaitGroup
}

// watchIdle is how long a job followed for Poll is kept without a poll;
// watchRetry how long a job whose following failed is polled remotely
// before it is followed again; watchBusy how recently the least recently
// polled job followed may have been polled for it to keep its place.
const (
	watchIdle  = time.Minute
	watchRetry = 5 * time.Second
	watchBusy  = 5 * time.Second
)

// watch is one job followed for Poll: its output as delivered (a
// contiguous run of chunks from from to end, at most bytes of it), and
// its info as of the last event delivered.
type watch struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// used is when it was last polled; ready: a backfill brought
	// everything published (the buffer then holds what the supervisor
	// retained, and what came after); failed: following ended before the
	// job did (Poll asks the supervisor; failedAt is when); final: the
	// job's end was delivered.
	used         time.Time
	ready, final bool
	failed       bool
	failedAt     time.Time
	chunks       []protocol.Chunk // chunks[head:] are live, in offset order
	head         int
	held         int   // bytes in live chunks
	max          int   // bound of held (one chunk is kept whatever its size)
	from, end    int64 // offsets: the oldest byte held, just past the newest
	hole         bool  // output was lost: from moves to the next chunk
	info         protocol.JobInfo
	infoEnd      int64 // info's outputEnd when it was taken
	instance     string
}

// newLocalPolls sets push-mode polling up for c (max from the options).
func newLocalPolls(c *Client) *localPolls {
	n := c.opts.LocalPollJobs
	if n == 0 {
		n = 16
	}
	if c.opts.SubscribeMode == SubscribePoll {
		n = 0
	}
	b := c.opts.LocalPollBytes
	if b <= 0 {
		b = 2 << 20
	}
	return &localPolls{c: c, max: max(n, 0), bytes: b, w: map[string]*watch{}, quit: make(chan struct{})}
}

// answer answers a poll of jobID from what is held locally, when it can.
func (lp *localPolls) answer(jobID string, cursor, maxBytes int64) (protocol.PollResult, bool) {
	lp.mu.Lock()
	w := lp.w[jobID]
	lp.mu.Unlock()
	if w == nil {
		return protocol.PollResult{}, false
	}
	return w.poll(cursor, maxBytes)
}

// follow starts following jobID for its later polls, after a poll the
// supervisor answered with r: from r's first event on (what later polls
// from its cursor on need), or from the next event when r had no
// output. Not for a job that is over (its output no longer changes: the
// supervisor answers), one already followed, or when no room can be made
// (every job followed was polled within watchBusy: rotating polls over
// more jobs than LocalPollJobs must not make each poll a new follow).
func (lp *localPolls) follow(jobID string, r protocol.PollResult) {
	if lp.max == 0 || jobID == "" || r.Job.Finished() {
		return
	}
	var stop []*watch
	defer func() {
		for _, w := range stop {
			w.cancel()
			<-w.done
		}
	}()
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.closed {
		return
	}
	now := time.Now()
	if w := lp.w[jobID]; w != nil {
		w.mu.Lock()
		retry := w.failed && now.Sub(w.failedAt) > watchRetry
		w.mu.Unlock()
		if !retry {
			return
		}
		delete(lp.w, jobID)
		stop = append(stop, w)
	}
	if len(lp.w) >= lp.max {
		var lru *watch
		var lruUsed time.Time
		for _, w := range lp.w {
			w.mu.Lock()
			used := w.used
			w.mu.Unlock()
			if lru == nil || used.Before(lruUsed) {
				lru, lruUsed = w, used
			}
		}
		if now.Sub(lruUsed) < watchBusy {
			return
		}
		delete(lp.w, lru.id)
		stop = append(stop, lru)
	}
	from, at := r.Job.LastSeq+1, r.Job.OutputEnd
	if len(r.Chunks) > 0 {
		from, at = r.Chunks[0].Seq, r.Chunks[0].Offset
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{id: jobID, cancel: cancel, done: make(chan struct{}), used: now, max: lp.bytes, from: at, end: at}
	lp.w[jobID] = w
	if !lp.janitor {
		lp.janitor = true
		lp.wg.Add(1)
		go lp.sweep()
	}
	lp.wg.Add(1)
	go func() {
		defer lp.wg.Done()
		defer close(w.done)
		err := lp.c.Follow(ctx, jobID, from, w.deliver, func(f *follower) { f.onCaughtUp = w.caughtUp })
		w.mu.Lock()
		defer w.mu.Unlock()
		// (a service may be started again: the supervisor answers for it
		// once its supervision ended)
		if !w.final || w.info.Restart != "" || err != nil && ctx.Err() == nil {
			w.failed, w.failedAt = true, time.Now()
		}
	}()
}

// sweep lets go of the jobs not polled for watchIdle, until close.
func (lp *localPolls) sweep() {
	defer lp.wg.Done()
	t := time.NewTicker(watchIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-lp.quit:
			return
		case <-t.C:
		}
		var stop []*watch
		lp.mu.Lock()
		for id, w := range lp.w {
			w.mu.Lock()
			idle := time.Since(w.used) > watchIdle
			w.mu.Unlock()
			if idle {
				delete(lp.w, id)
				stop = append(stop, w)
			}
		}
		lp.mu.Unlock()
		for _, w := range stop {
			w.cancel()
			<-w.done
		}
	}
}

// close stops every watch and waits for them.
func (lp *localPolls) close() {
	lp.mu.Lock()
	if lp.closed {
		lp.mu.Unlock()
		return
	}
	lp.closed = true
	close(lp.quit)
	ws := lp.w
	lp.w = nil
	lp.mu.Unlock()
	for _, w := range ws {
		w.cancel()
	}
	lp.wg.Wait()
}

// caughtUp takes what a backfill that brought everything published says
// of the job: its info (its dynamic parts then follow the events
// delivered) and the supervisor's instance.
func (w *watch) caughtUp(res protocol.SubscribeResult) {
	w.mu.Lock()
	defer w.mu.Unlock()
	info := res.Job
	if info.Finished() && !w.final {
		// (its end is not delivered yet: not shown before its output)
		info.State, info.Reason, info.ExitCode, info.Signal, info.EndedAt = protocol.StateExiting, "", nil, "", 0
	}
	if w.final {
		info.State, info.Reason, info.ExitCode, info.Signal, info.Error, info.EndedAt =
			w.info.State, w.info.Reason, w.info.ExitCode, w.info.Signal, w.info.Error, w.info.EndedAt
	}
	// Its byte counts include output read but not yet published (in the
	// merge window): output events below infoEnd are counted in them
	// already. (Offsets a resumed service skipped are not known here:
	// its pending output may then be counted twice.)
	pending := max(0, info.StdoutBytes+info.StderrBytes-info.OutputEnd)
	w.info, w.infoEnd, w.instance = info, info.OutputEnd+pending, res.InstanceID
	w.ready = true
}

// deliver takes one event of the job (Follow's FollowFunc).
func (w *watch) deliver(ev protocol.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ev.Seq > w.info.LastSeq {
		w.info.LastSeq = ev.Seq
	}
	switch ev.Kind {
	case protocol.KindStdout, protocol.KindStderr:
		var p protocol.OutputPayload
		if err := ev.DecodePayload(&p); err != nil || len(p.Data) == 0 {
			return nil
		}
		stream := protocol.Stdout
		if ev.Kind == protocol.KindStderr {
			stream = protocol.Stderr
		}
		w.add(protocol.Chunk{Seq: ev.Seq, Stream: stream, Offset: p.Offset, Data: p.Data})
		if p.Offset >= w.infoEnd { // (output the info's counts did not have)
			if ev.Kind == protocol.KindStdout {
				w.info.StdoutBytes += int64(len(p.Data))
			} else {
				w.info.StderrBytes += int64(len(p.Data))
			}
		}
		w.info.LastOutputAt = ev.Ts
	case protocol.KindGap:
		// Output between what is held and what comes next is lost:
		// polls below the next chunk ask the supervisor (it says so).
		w.chunks, w.head, w.held, w.hole = nil, 0, 0, true
	case protocol.KindStarted:
		var p protocol.StartedPayload
		if ev.DecodePayload(&p) == nil {
			w.info.Pid, w.info.Pgid = p.Pid, p.Pgid
			if p.Attempt > 0 {
				w.info.Attempt = p.Attempt
			}
		}
		// (a service's new run: the last one's end is history)
		w.info.State, w.info.StartedAt = protocol.StateRunning, ev.Ts
		w.info.Reason, w.info.ExitCode, w.info.Signal, w.info.Error, w.info.EndedAt = "", nil, "", "", 0
	case protocol.KindRestarting:
		w.info.State = protocol.StateRestarting
	default:
		if ev.Kind.Terminal() {
			var p protocol.ExitPayload
			w.info.State, w.info.EndedAt = protocol.StateExited, ev.Ts
			if ev.DecodePayload(&p) == nil {
				w.info.Reason, w.info.ExitCode, w.info.Signal, w.info.Error = p.Reason, p.ExitCode, p.Signal, p.Error
				if p.OutputEnd > w.end {
					w.end = p.OutputEnd
				}
				if p.EndedAt > 0 {
					// (a supervisor that says them: the job's own, exact;
					// those counted from the events are close only)
					w.info.EndedAt, w.info.LastOutputAt = p.EndedAt, p.LastOutputAt
					w.info.StdoutBytes, w.info.StderrBytes = p.StdoutBytes, p.StderrBytes
				}
			}
			w.info.StdinOpen, w.info.OutputPaced, w.info.OutputHeld = false, false, false
			w.final = true
		}
	}
	return nil
}

// add appends c (past the end held: Follow delivers each offset once),
// dropping the oldest chunks beyond the bound.
func (w *watch) add(c protocol.Chunk) {
	if w.hole || w.head == len(w.chunks) {
		w.from = c.Offset // (a service resumed after a crash skips offsets: no hole)
		w.hole = false
	}
	c.Data = append([]byte(nil), c.Data...) // (the event's buffer is Follow's)
	w.chunks = append(w.chunks, c)
	w.held += len(c.Data) + chunkCost
	w.end = c.Offset + int64(len(c.Data))
	for w.held > w.max && len(w.chunks)-w.head > 1 {
		w.held -= len(w.chunks[w.head].Data) + chunkCost
		w.chunks[w.head] = protocol.Chunk{}
		w.head++
		w.from = w.chunks[w.head].Offset
	}
	if w.head > 64 && w.head > len(w.chunks)/2 {
		w.chunks = append([]protocol.Chunk(nil), w.chunks[w.head:]...)
		w.head = 0
	}
}

// chunkCost is what holding a chunk costs beyond its bytes (its record;
// the supervisor's ring counts the same), so that output in tiny events
// cannot hold a hundred times LocalPollBytes.
const chunkCost = 128

// poll serves a poll from what is held, as the supervisor's ring does
// (see jobs ring.read), or reports false.
func (w *watch) poll(cursor, maxBytes int64) (protocol.PollResult, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.used = time.Now()
	if !w.ready || w.failed || w.hole || cursor < w.from || cursor > w.end {
		return protocol.PollResult{}, false
	}
	if maxBytes <= 0 || maxBytes > protocol.MaxPollBytes {
		maxBytes = protocol.MaxPollBytes
	}
	res := protocol.PollResult{Chunks: []protocol.Chunk{}, Next: cursor, InstanceID: w.instance}
	var n int64
	live := w.chunks[w.head:]
	first := sort.Search(len(live), func(i int) bool { return live[i].Offset+int64(len(live[i].Data)) > cursor })
	for _, c := range live[first:] {
		end := c.Offset + int64(len(c.Data))
		if end <= res.Next {
			continue
		}
		d, off := c.Data, c.Offset
		if off < res.Next {
			d, off = d[res.Next-off:], res.Next
		}
		if n+int64(len(d)) > maxBytes {
			if room := maxBytes - n; room > 0 {
				res.Chunks = append(res.Chunks, protocol.Chunk{Seq: c.Seq, Stream: c.Stream, Offset: off, Data: append([]byte(nil), d[:room]...)})
				res.Next = off + room
			}
			res.More = true
			break
		}
		res.Chunks = append(res.Chunks, protocol.Chunk{Seq: c.Seq, Stream: c.Stream, Offset: off, Data: append([]byte(nil), d...)})
		n += int64(len(d))
		res.Next = off + int64(len(d))
	}
	res.Job = w.info
	res.Job.OutputEnd, res.Job.RetainedFrom = w.end, w.from
	// (the caller's own copies)
	res.Job.Argv, res.Job.Labels = slices.Clone(res.Job.Argv), maps.Clone(res.Job.Labels)
	if c := res.Job.ExitCode; c != nil {
		res.Job.ExitCode = &[]int{*c}[0]
	}
	return res, true
}
