package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// DefaultJobBufferBytes bounds the unread output a Job holds per stream.
const DefaultJobBufferBytes = 8 << 20

// OutputLostError says output never reached the reader: either the
// supervisor no longer retained it (Reason "not-retained") or the reader
// fell more than the buffer bound behind (Reason "reader-too-slow").
type OutputLostError struct {
	JobID  string
	Stream protocol.Stream
	// Bytes lost (0 when unknown). For events no longer retained, the
	// stream they carried is not known: both streams' readers are told,
	// each with the range's whole output.
	Bytes  int64
	Seqs   string // event seqs lost, when known ("12-40")
	Reason string
}

func (e *OutputLostError) Error() string {
	amount := "an unknown amount"
	if e.Bytes > 0 {
		amount = fmt.Sprintf("%d bytes", e.Bytes)
	}
	return fmt.Sprintf("job %s: %s of %s output lost (%s; events %s)", e.JobID, amount, e.Stream, e.Reason, e.Seqs)
}

// Job is a handle on a job: its output as io.Readers, its end with Wait.
// Methods are safe for concurrent use. Output is delivered exactly once and
// in order; what cannot be delivered surfaces as an *OutputLostError from
// the stream's Read, after the bytes before it.
type Job struct {
	// ID is the job's id.
	ID string

	b       JobBackend
	cancel  context.CancelFunc
	done    chan struct{} // closed when following ended
	out     [2]*streamBuf
	exit    protocol.ExitPayload
	exitErr error
	mu      sync.Mutex
	lost    []*OutputLostError
	// stopLife ends the watch on the client's life (see startJob).
	stopLife func() bool
	// paced: its buffers hold the job for its readers (see Start).
	paced bool
}

// JobBackend is one job where it runs, as a Job needs it: the supervisor
// (Client.Start, Client.Open), or an engine in this process (pkg/local,
// for a Dispatcher's origin mode). Implement it to give such an engine's
// jobs Job handles (NewJob); a Job calls Follow once, from a goroutine of
// its own, and the others from its callers' goroutines.
type JobBackend interface {
	// Follow hands the job's events to fn exactly once and in seq order
	// from seq 1 (events no longer there as job.gap events naming the
	// missing seqs) until its terminal event (job.exited or job.failed)
	// has been given, returning nil then; or fn's error, or ctx's once
	// ctx ends. fn may block (a paced Job's full buffer): for a paced
	// job, what fn has returned from is what the reader took, and the
	// job is held a window past it.
	Follow(ctx context.Context, fn FollowFunc) error
	// Kill terminates the job: SIGTERM to its process group (its whole
	// tree), a grace period, SIGKILL; reason manual-cancel.
	Kill(ctx context.Context) error
	// Write sends input to the job's stdin (or PTY); eof closes its stdin
	// after data.
	Write(ctx context.Context, data []byte, eof bool) error
	// Ended returns nil once the job has finished (for a paced Job's
	// Wait: its Follow may be stuck on a reader that stopped), or ctx's
	// error.
	Ended(ctx context.Context) error
}

// NewJob returns a Job following b's job (id is its id) into buffers of
// bufferBytes per stream (0 means DefaultJobBufferBytes). With paced, b
// holds the job to what Follow's fn was given, and the Job's buffers hold
// Follow once a stream is being read (see Client.Start), rather than
// dropping what overflows them. Client.Start and pkg/local make theirs
// with it.
func NewJob(id string, b JobBackend, bufferBytes int, paced bool) *Job {
	return startJob(id, b, bufferBytes, paced, nil)
}

// zmqBackend is job id of the supervisor; paced: spawned with Pace, its
// follow paces it (see Start).
type zmqBackend struct {
	c     *Client
	id    string
	paced bool
}

func (b zmqBackend) Follow(ctx context.Context, fn FollowFunc) error {
	if b.paced {
		return b.c.Follow(ctx, b.id, 1, fn, Paced())
	}
	return b.c.Follow(ctx, b.id, 1, fn)
}

func (b zmqBackend) Ended(ctx context.Context) error {
	for {
		_, finished, err := b.c.Wait(ctx, b.id, protocol.MaxWaitMs*time.Millisecond)
		if err != nil || finished {
			return err
		}
	}
}

func (b zmqBackend) Kill(ctx context.Context) error {
	_, err := b.c.Kill(ctx, b.id, "")
	return err
}

func (b zmqBackend) Write(ctx context.Context, data []byte, eof bool) error {
	_, err := b.c.Write(ctx, b.id, data, eof)
	return err
}

// Start spawns a job on the supervisor and follows it. bufferBytes bounds
// the unread output held per stream (0 means DefaultJobBufferBytes; one
// output event is held whatever its size, so a reader keeping up loses
// nothing).
//
// With args.Pace the job is held to its readers' pace: once a stream is
// being read, its full buffer makes the job wait (as a pipe's writer
// waits for its reader) instead of losing output. A stream never read
// drops what overflows its buffer (with an OutputLostError), so that a
// caller that reads Stdout only, or calls Wait first, is not stuck:
// start reading before the job has printed bufferBytes to lose nothing.
// A reader that stops reading for the supervisor's --pace-stall-limit
// lets the job run on, and then loses what the ring buffer drops (an
// OutputLostError says so). Wait returns once the job has ended, even
// with a reader that stopped (what its full buffer cannot take is then
// dropped, reported). Close the Job (or the Client) to stop following.
func (c *Client) Start(ctx context.Context, args protocol.SpawnArgs, bufferBytes int) (*Job, error) {
	info, err := c.Spawn(ctx, args)
	if err != nil {
		return nil, err
	}
	return startJob(info.JobID, zmqBackend{c: c, id: info.JobID, paced: args.Pace}, bufferBytes, args.Pace, c.life), nil
}

// Open follows an existing job of the supervisor (from its first event).
func (c *Client) Open(jobID string, bufferBytes int) *Job {
	return startJob(jobID, zmqBackend{c: c, id: jobID}, bufferBytes, false, nil)
}

// startJob follows job id through b into buffers of bufferBytes per
// stream; blocking: a full buffer holds the follow (which paces the job)
// instead of dropping output.
func startJob(id string, b JobBackend, bufferBytes int, blocking bool, life context.Context) *Job {
	if bufferBytes <= 0 {
		bufferBytes = DefaultJobBufferBytes
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &Job{ID: id, b: b, cancel: cancel, done: make(chan struct{}), paced: blocking}
	for i := range j.out {
		j.out[i] = newStreamBuf(bufferBytes)
		j.out[i].blocking = blocking
	}
	if blocking && life != nil {
		// (the client's Close ends a follow waiting for room, as it ends
		// the follow)
		j.stopLife = context.AfterFunc(life, j.abortBuffers)
	}
	go j.run(ctx)
	return j
}

func (j *Job) run(ctx context.Context) {
	defer close(j.done)
	if j.stopLife != nil {
		defer j.stopLife()
	}
	err := j.b.Follow(ctx, func(ev protocol.Event) error {
		switch ev.Kind {
		case protocol.KindStdout, protocol.KindStderr:
			p, err := ev.Output()
			if err != nil {
				return err
			}
			i := 0
			if ev.Kind == protocol.KindStderr {
				i = 1
			}
			if !j.out[i].put(p.Data) && !j.out[i].isAborted() { // (an aborted one: following ends)
				j.loss(&OutputLostError{JobID: j.ID, Stream: streamOf(i), Bytes: int64(len(p.Data)), Seqs: fmt.Sprint(ev.Seq), Reason: "reader-too-slow"}, i)
			}
		case protocol.KindGap:
			var g protocol.GapPayload
			_ = ev.DecodePayload(&g)
			if g.NoOutput {
				break // (events other than output: nothing lost to the readers)
			}
			// Which stream the missing events carried is not known: both
			// readers learn about it.
			for i := range j.out {
				j.loss(&OutputLostError{JobID: j.ID, Stream: streamOf(i), Bytes: g.Bytes, Seqs: fmt.Sprintf("%d-%d", g.From, g.To), Reason: "not-retained"}, i)
			}
		case protocol.KindExited, protocol.KindFailed:
			// (a service's later end must not keep an earlier one's
			// fields: each is decoded afresh)
			var exit protocol.ExitPayload
			if err := ev.DecodePayload(&exit); err != nil {
				return err
			}
			j.exit = exit
		}
		return nil
	})
	j.mu.Lock()
	j.exitErr = err
	j.mu.Unlock()
	for _, s := range j.out {
		s.close(err)
	}
}

func streamOf(i int) protocol.Stream {
	if i == 1 {
		return protocol.Stderr
	}
	return protocol.Stdout
}

func (j *Job) loss(e *OutputLostError, stream int) {
	j.mu.Lock()
	j.lost = append(j.lost, e)
	j.mu.Unlock()
	j.out[stream].putErr(e)
}

// Stdout returns the job's standard output (for PTY jobs: everything).
func (j *Job) Stdout() io.Reader { return j.out[0] }

// Stderr returns the job's standard error.
func (j *Job) Stderr() io.Reader { return j.out[1] }

// Lost returns every loss reported so far.
//
// Output lost from events no longer retained is reported to both streams
// (which one the events carried is not known), each with the whole
// range's Bytes: do not add up the two.
func (j *Job) Lost() []*OutputLostError {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]*OutputLostError(nil), j.lost...)
}

// Wait blocks until the job ended (or following failed, or ctx ended) and
// returns how it ended. It does not need the output to be read.
func (j *Job) Wait(ctx context.Context) (protocol.ExitPayload, error) {
	if j.paced {
		// A paced Job's follow may wait for a reader that stopped: once
		// the job has ended there is nothing left to pace, and what does
		// not fit the buffers is dropped (reported) so that the end gets
		// through.
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if j.b.Ended(wctx) == nil {
				for _, s := range j.out {
					s.stopBlocking()
				}
			}
		}()
		defer func() { cancel(); wg.Wait() }()
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		return protocol.ExitPayload{}, ctx.Err()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.exit, j.exitErr
}

// Kill terminates the job (SIGTERM, grace, SIGKILL to its whole tree).
func (j *Job) Kill(ctx context.Context) error { return j.b.Kill(ctx) }

// Write sends input to the job (see Client.Write).
func (j *Job) Write(ctx context.Context, data []byte, eof bool) error {
	return j.b.Write(ctx, data, eof)
}

// Close stops following the job (the job itself keeps running) and
// releases the readers.
func (j *Job) Close() error {
	j.cancel()
	j.abortBuffers() // (a follow waiting for room in a paced job's buffer)
	<-j.done
	return nil
}

// abortBuffers ends waits for room in the stream buffers (following is
// over: what they would have taken is dropped).
func (j *Job) abortBuffers() {
	for _, s := range j.out {
		s.abort()
	}
}

// streamBuf is a bounded, blocking byte queue with in-band errors.
type streamBuf struct {
	mu     sync.Mutex
	cond   *sync.Cond
	items  []item
	size   int
	max    int
	closed bool
	err    error // final error (nil: io.EOF)
	// blocking: put waits for room (a paced job's follow: the job waits)
	// rather than dropping, once reading began (a stream nobody reads
	// must not hold the job, nor Wait, for ever); aborted ends such waits
	// (Job.Close).
	blocking, aborted, reading bool
}

type item struct {
	data []byte
	err  error
}

func newStreamBuf(max int) *streamBuf {
	s := &streamBuf{max: max}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// put appends data; false when the reader is too far behind (nothing stored).
func (s *streamBuf) put(b []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.blocking && s.reading && s.size+len(b) > s.max && s.size > 0 && !s.aborted {
		s.cond.Wait()
	}
	if s.size+len(b) > s.max && s.size > 0 {
		// (one chunk always fits into an empty buffer, however large:
		// a reader that is keeping up never loses output)
		return false
	}
	s.items = append(s.items, item{data: b})
	s.size += len(b)
	s.cond.Broadcast()
	return true
}

// abort ends a put waiting for room (it drops its data: following ends).
func (s *streamBuf) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborted = true
	s.cond.Broadcast()
}

// stopBlocking makes put drop what does not fit from now on (the job is
// over: nothing left to pace).
func (s *streamBuf) stopBlocking() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocking = false
	s.cond.Broadcast()
}

// isAborted reports whether following was ended (abort).
func (s *streamBuf) isAborted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

func (s *streamBuf) putErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items = append(s.items, item{err: err})
	s.cond.Broadcast()
}

func (s *streamBuf) close(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if err != nil && !errors.Is(err, context.Canceled) {
		s.err = err
	}
	s.cond.Broadcast()
}

// WriteTo writes the output to w as it arrives (io.Copy uses it: no copy
// through an intermediate buffer) until the end of the stream, returning
// nil then, or the first error: an in-band loss error, the error that
// ended following, or w's.
func (s *streamBuf) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		s.mu.Lock()
		s.reading = true
		for len(s.items) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.items) == 0 {
			err := s.err
			s.mu.Unlock()
			return n, err
		}
		it := s.items[0]
		s.items = s.items[1:]
		s.size -= len(it.data)
		if s.blocking {
			s.cond.Broadcast() // (room for a waiting put)
		}
		s.mu.Unlock()
		if it.err != nil {
			return n, it.err
		}
		k, err := w.Write(it.data)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
}

// Read returns buffered output, then an in-band loss error once, then
// io.EOF (or the error that ended following).
func (s *streamBuf) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reading = true
	for len(s.items) == 0 && !s.closed {
		s.cond.Wait()
	}
	if len(s.items) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		return 0, io.EOF
	}
	it := &s.items[0]
	if it.err != nil {
		err := it.err
		s.items = s.items[1:]
		return 0, err
	}
	n := copy(p, it.data)
	it.data = it.data[n:]
	s.size -= n
	if len(it.data) == 0 {
		s.items = s.items[1:]
	}
	if s.blocking {
		s.cond.Broadcast() // (room for a waiting put)
	}
	return n, nil
}
