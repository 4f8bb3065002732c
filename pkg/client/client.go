// Package client is the Go client of exec-supervisor: context-aware calls
// for every control op over one multiplexed connection, and Follow, which
// streams a job's events exactly once and in order by combining the event
// socket with backfill.
//
// A Client is safe for concurrent use. It connects lazily, and recreates
// its control socket itself after a timeout or a broken connection (it
// never relies on the ZeroMQ engine's automatic reconnect).
//
// It is only a client: it speaks the protocol (pkg/protocol) over ZeroMQ
// and links no job engine. Running jobs in this process instead (a
// Dispatcher's origin mode) is pkg/local's, which a program imports only
// if it wants that.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("client is closed")

// ConnectError says the supervisor could not be reached, or (Lost) that
// the connection broke during the call.
type ConnectError struct {
	Address string
	Err     error
	// Lost says the supervisor had accepted the connection (one was there:
	// it went away, or is restarting) and it broke before the reply, unlike
	// a dial that failed.
	Lost bool
	// Unsent says the request never reached the supervisor whole (the
	// dial failed, or the connection broke while it was being written):
	// nothing of it was carried out, and it may be sent elsewhere.
	Unsent bool
}

func (e *ConnectError) Error() string {
	if permanentDialError(e.Err) {
		return fmt.Sprintf("cannot talk to the supervisor at %s: %v", e.Address, e.Err)
	}
	return fmt.Sprintf("no supervisor answering at %s: %v", e.Address, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// Client talks to one supervisor.
type Client struct {
	opts   Options
	prefix string
	nextID atomic.Uint64

	mu      sync.Mutex
	conn    *conn
	closed  bool
	pending map[string]chan *protocol.Reply
	// life is cancelled by Close (with quit closed): dials in progress
	// end with it.
	life    context.Context
	endLife context.CancelFunc
	// pacers are the paced Follows in progress (under mu): when the
	// control connection is lost, they pace again on the next one at
	// once (repace, one goroutine at a time, waited for by Close).
	pacers   map[*follower]struct{}
	repacing bool
	repaceWG sync.WaitGroup
	// dropWG counts connections given up and being closed (see drop):
	// Close waits for them.
	dropWG sync.WaitGroup
	// quit is closed by Close: followers (their own event connections)
	// stop on it.
	quit chan struct{}

	// backfills bounds concurrent subscribe (bulk replay) requests, so
	// that many followers catching up at once neither flood this client's
	// memory nor the supervisor's reply queue for this connection.
	backfills chan struct{}

	// local answers push-mode polls (see Poll).
	local *localPolls
}

// maxConcurrentBackfills bounds subscribe requests in flight per Client.
const maxConcurrentBackfills = 8

// conn is one control socket and its reader goroutine.
type conn struct {
	sock *zmtp.Client
	done chan struct{}
	// evicted is set (before done is closed) when the supervisor gave the
	// connection up as idle (zmtp.IdleEvicted): it handled nothing sent
	// on it after its last reply.
	evicted atomic.Bool
}

// New returns a Client. It does not connect until the first call.
func New(opts Options) *Client {
	opts.fill()
	var b [4]byte
	_, _ = rand.Read(b[:])
	c := &Client{opts: opts, prefix: hex.EncodeToString(b[:]) + "-", pending: map[string]chan *protocol.Reply{},
		backfills: make(chan struct{}, maxConcurrentBackfills), quit: make(chan struct{})}
	c.life, c.endLife = context.WithCancel(context.Background())
	c.local = newLocalPolls(c)
	return c
}

// Options returns the effective options.
func (c *Client) Options() Options { return c.opts }

// Close closes the connection. Calls in flight, Follow and Job handles
// fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		close(c.quit)
		c.endLife()
	}
	c.closed = true
	cn := c.conn
	c.conn = nil
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	if cn != nil {
		cn.close()
	}
	c.repaceWG.Wait()
	c.dropWG.Wait()
	c.local.close()
	return nil
}

func (cn *conn) close() {
	cn.sock.Close()
	<-cn.done
}

// connect returns the live connection, dialing one if needed.
// currentConn is the control connection in use (nil: none yet, or
// dropped).
func (c *Client) currentConn() *conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

func (c *Client) connect(ctx context.Context) (*conn, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if c.conn != nil {
		cn := c.conn
		select {
		case <-cn.done: // its reader ended: the connection is gone
			c.conn = nil
			c.mu.Unlock()
			go cn.close()
		default:
			c.mu.Unlock()
			return cn, nil
		}
	} else {
		c.mu.Unlock()
	}

	// Close ends the dialing too (a call waiting to connect fails at once
	// with ErrClosed, as one waiting for its reply does).
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.life, cancel)
	defer stop()
	var lastErr error
	for attempt := 0; attempt < c.opts.MaxReconnectAttempts; attempt++ {
		if c.life.Err() != nil {
			return nil, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, &ConnectError{Address: c.opts.ControlAddress, Err: errors.Join(lastErr, err), Unsent: true}
		}
		if attempt > 0 {
			t := time.NewTimer(c.opts.ReconnectInterval)
			select {
			case <-dctx.Done():
				t.Stop()
				if c.life.Err() != nil {
					return nil, ErrClosed
				}
				return nil, &ConnectError{Address: c.opts.ControlAddress, Err: errors.Join(lastErr, ctx.Err()), Unsent: true}
			case <-t.C:
			}
		}
		// (the caller's ctx bounds the dial; the connection outlives it)
		dopts, err := c.opts.dialOptions(c.opts.ControlAddress)
		var sock *zmtp.Client
		if err == nil {
			sock, err = zmtp.DialClientWith(dctx, "DEALER", c.opts.ControlAddress, dopts)
		}
		if err != nil {
			if c.life.Err() != nil {
				return nil, ErrClosed
			}
			if permanentDialError(err) {
				return nil, &ConnectError{Address: c.opts.ControlAddress, Err: err, Unsent: true}
			}
			lastErr = err
			continue
		}
		cn := &conn{sock: sock, done: make(chan struct{})}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			sock.Close()
			close(cn.done)
			return nil, ErrClosed
		}
		if c.conn != nil { // another caller won the race
			old := c.conn
			c.mu.Unlock()
			sock.Close()
			close(cn.done)
			return old, nil
		}
		c.conn = cn
		c.mu.Unlock()
		go c.readLoop(cn)
		return cn, nil
	}
	return nil, &ConnectError{Address: c.opts.ControlAddress, Err: lastErr, Unsent: true}
}

// drop forgets cn (after a timeout or a send failure) so that the next
// call dials a fresh socket.
// dropConn closes the control connection, if there is one: calls waiting
// on it end at once (a ConnectError), the next call dials afresh. For a
// Pool's member found not answering (a stopped supervisor keeps its
// connections open).
func (c *Client) dropConn() {
	if cn := c.currentConn(); cn != nil {
		c.drop(cn)
	}
}

func (c *Client) drop(cn *conn) {
	c.mu.Lock()
	if c.conn != cn {
		c.mu.Unlock()
		return
	}
	c.conn = nil
	c.dropWG.Add(1) // (under mu: before Close can wait)
	c.mu.Unlock()
	go func() { // (not here: drop may run on cn's own reader, which close waits for)
		defer c.dropWG.Done()
		cn.close()
	}()
}

// addPacer and removePacer keep the paced Follows in progress.
func (c *Client) addPacer(f *follower) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pacers == nil {
		c.pacers = map[*follower]struct{}{}
	}
	c.pacers[f] = struct{}{}
}

func (c *Client) removePacer(f *follower) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pacers, f)
}

// connLost paces the paced Follows again on a new connection once the
// connection that held their paces is gone (the supervisor ended them).
func (c *Client) connLost() {
	c.mu.Lock()
	if c.closed || c.repacing || len(c.pacers) == 0 {
		c.mu.Unlock()
		return
	}
	c.repacing = true
	c.repaceWG.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.repaceWG.Done()
		for {
			c.mu.Lock()
			fs := make([]*follower, 0, len(c.pacers))
			for f := range c.pacers {
				fs = append(fs, f)
			}
			c.mu.Unlock()
			for _, f := range fs {
				f.repace()
			}
			c.mu.Lock()
			// (once more if the new connection went too, meanwhile)
			again := !c.closed && c.conn == nil && len(c.pacers) > 0
			if !again {
				c.repacing = false
				c.mu.Unlock()
				return
			}
			c.mu.Unlock()
			select {
			case <-c.quit:
				c.mu.Lock()
				c.repacing = false
				c.mu.Unlock()
				return
			case <-time.After(c.opts.ReconnectInterval):
			}
		}
	}()
}

func (c *Client) readLoop(cn *conn) {
	defer c.connLost() // (after done is closed: the next call dials afresh)
	defer close(cn.done)
	for {
		frames, err := cn.sock.Recv()
		if err != nil {
			var re *zmtp.RefusedError
			cn.evicted.Store(errors.As(err, &re) && re.Reason == zmtp.IdleEvicted)
			return
		}
		if len(frames) == 0 {
			continue
		}
		// Each frame is a fresh buffer: the reply (and the output a
		// backfill carries) may alias it.
		rep, err := protocol.DecodeReplyNoCopy(frames[len(frames)-1])
		if err != nil {
			continue
		}
		c.mu.Lock()
		id := rep.ID
		if id == "" && !rep.OK && rep.Error != nil && rep.Error.Code == protocol.CodeTooLarge && len(c.pending) == 1 {
			// A request too large for the supervisor whose id it could
			// not read: with one request in flight, it was that one.
			for only := range c.pending {
				id = only
			}
		}
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- rep
		}
	}
}

// Call sends op with args and decodes the result into result (which may be
// nil). Server errors are returned as *protocol.Error.
func (c *Client) Call(ctx context.Context, op protocol.Op, args, result any) error {
	return c.callResult(ctx, op, args, 0, result)
}

// callResult is Call for a reply the server holds up to held (a wait).
func (c *Client) callResult(ctx context.Context, op protocol.Op, args any, held time.Duration, result any) error {
	rep, err := c.call(ctx, op, args, held)
	if err != nil {
		return err
	}
	return rep.DecodeResult(result)
}

// call sends op with args and returns the reply envelope. The reply is
// awaited for RequestTimeout plus held (the time the server holds it: a
// wait), or until an earlier ctx deadline.
func (c *Client) call(parent context.Context, op protocol.Op, args any, held time.Duration) (*protocol.Reply, error) {
	rep, err := c.callOnce(parent, op, args, held)
	if errors.Is(err, errEvicted) {
		// The supervisor gave the connection up as idle as the request
		// went out, and handled nothing of it: send it again, once.
		rep, err = c.callOnce(parent, op, args, held)
	}
	if errors.Is(err, errEvicted) {
		var ce *ConnectError
		errors.As(err, &ce)
		ce.Err = errors.New("connection given up by the supervisor (idle) before the reply, twice")
	}
	return rep, err
}

// errEvicted marks a ConnectError of a connection the supervisor gave up
// as idle (see conn.evicted).
var errEvicted = errors.New(zmtp.IdleEvicted)

func (c *Client) callOnce(parent context.Context, op protocol.Op, args any, held time.Duration) (*protocol.Reply, error) {
	ctx, cancel := context.WithTimeout(parent, c.opts.RequestTimeout+held)
	defer cancel()
	id := c.prefix + strconv.FormatUint(c.nextID.Add(1), 36)
	body, err := protocol.EncodeRequest(id, op, args)
	if err != nil {
		return nil, err
	}
	if len(body) > protocol.MaxRequestBytes {
		// No supervisor takes it (one may be configured to take less).
		return nil, protocol.Errorf(protocol.CodeTooLarge, "%s request is %d bytes; the limit is %d", op, len(body), protocol.MaxRequestBytes)
	}
	cn, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan *protocol.Reply, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	if err := cn.sock.SendContext(ctx, body); err != nil {
		forget()
		if ctx.Err() != nil {
			// Given up while other calls' requests went out first, or
			// while the supervisor took nothing (a request cut off part
			// way closed the connection: the next call dials afresh).
			return nil, fmt.Errorf("%s request to %s: %w", op, c.opts.ControlAddress, err)
		}
		c.drop(cn)
		// (A message cut off part way is never handled: the supervisor
		// takes only whole ones.)
		return nil, &ConnectError{Address: c.opts.ControlAddress, Err: err, Lost: true, Unsent: true}
	}
	select {
	case rep, ok := <-ch:
		if !ok {
			return nil, ErrClosed
		}
		return rep, nil
	case <-cn.done:
		// The connection broke (supervisor gone or restarting): no reply
		// can come on it. The next call dials afresh.
		select {
		case rep, ok := <-ch: // the reply made it just before
			if ok {
				return rep, nil
			}
			return nil, ErrClosed
		default:
		}
		forget()
		c.drop(cn)
		if cn.evicted.Load() {
			return nil, &ConnectError{Address: c.opts.ControlAddress, Err: errEvicted, Lost: true, Unsent: true}
		}
		return nil, &ConnectError{Address: c.opts.ControlAddress, Err: errors.New("connection lost before the reply"), Lost: true}
	case <-ctx.Done():
		forget()
		if parent.Err() == nil {
			// No reply within RequestTimeout (plus what the server holds
			// it for): the socket may be wedged (peer gone); start afresh
			// next time. A caller that gave up (its own ctx) drops only
			// its call: the connection carries others' requests and held
			// waits.
			c.drop(cn)
		} else if held > 0 {
			if job := c.abandon(cn, id); job != "" {
				return nil, &AbandonedError{JobID: job, Err: fmt.Errorf("%s request to %s: %w", op, c.opts.ControlAddress, ctx.Err())}
			}
		}
		return nil, fmt.Errorf("%s request to %s: %w", op, c.opts.ControlAddress, ctx.Err())
	}
}

// AbandonedError is returned by a wait (SpawnWait, Wait) whose caller gave
// up (its context) while the supervisor held the reply: the job keeps
// running. JobID names it (for SpawnWait, the job it started, which the
// caller would not know otherwise).
type AbandonedError struct {
	JobID string
	Err   error // wraps the context's error
}

func (e *AbandonedError) Error() string {
	return fmt.Sprintf("%v (job %s keeps running)", e.Err, e.JobID)
}

func (e *AbandonedError) Unwrap() error { return e.Err }

// abandon tells the supervisor that the reply it holds for request id (a
// wait the caller gave up on) is not wanted: otherwise it stays held until
// its waitMs runs out, counting against the connection's held waits (a
// caller cancelling waits got too-many-waits after 1000). It returns the
// job the request waited for, as the supervisor answers within
// abandonWait ("" if not).
func (c *Client) abandon(cn *conn, id string) string {
	cid := c.prefix + strconv.FormatUint(c.nextID.Add(1), 36)
	body, err := protocol.EncodeRequest(cid, protocol.OpCancel, &protocol.CancelArgs{RequestID: id})
	if err != nil {
		return ""
	}
	ch := make(chan *protocol.Reply, 1)
	c.mu.Lock()
	c.pending[cid] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, cid)
		c.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), abandonWait)
	defer cancel()
	if cn.sock.SendContext(ctx, body) != nil {
		return ""
	}
	select {
	case rep, ok := <-ch:
		var r protocol.CancelResult
		if ok && rep.DecodeResult(&r) == nil {
			return r.JobID
		}
	case <-cn.done:
	case <-ctx.Done():
	}
	return ""
}

// abandonWait bounds how long a caller who gave up on a wait waits for the
// supervisor to confirm the cancel (and name the job).
const abandonWait = time.Second

// Spawn starts a job.
func (c *Client) Spawn(ctx context.Context, args protocol.SpawnArgs) (protocol.JobInfo, error) {
	var r protocol.SpawnResult
	err := c.Call(ctx, protocol.OpSpawn, &args, &r)
	return r.Job, err
}

// SpawnWait spawns a job and waits up to wait (at most
// protocol.MaxWaitMs, and less than ctx's deadline) for it to finish, in
// one round trip: the reply
// comes when the job has finished (finished true: the returned JobInfo is
// final) or when wait has passed (finished false; Wait can go on). If ctx
// is cancelled while the job runs, the error is an *AbandonedError and the
// JobInfo carries the job's id: it keeps running.
func (c *Client) SpawnWait(ctx context.Context, args protocol.SpawnArgs, wait time.Duration) (protocol.JobInfo, bool, error) {
	wait = untilDeadline(ctx, wait)
	args.WaitMs = max(wait.Milliseconds(), 1)
	var r protocol.SpawnResult
	err := c.callResult(ctx, protocol.OpSpawn, &args, wait, &r)
	if ae := (*AbandonedError)(nil); errors.As(err, &ae) {
		r.Job.JobID = ae.JobID // (started, running on: the caller must know it)
	}
	return r.Job, r.Finished, err
}

// Wait waits up to wait (0 or less: protocol.DefaultWaitMs; at most
// protocol.MaxWaitMs, and less than ctx's deadline) for a job to finish;
// finished says whether it did (the JobInfo is then final).
func (c *Client) Wait(ctx context.Context, jobID string, wait time.Duration) (protocol.JobInfo, bool, error) {
	if wait <= 0 {
		wait = protocol.DefaultWaitMs * time.Millisecond
	}
	wait = untilDeadline(ctx, wait)
	var r protocol.SpawnResult
	err := c.callResult(ctx, protocol.OpWait, &protocol.WaitArgs{JobID: jobID, WaitMs: max(wait.Milliseconds(), 1)}, wait, &r)
	return r.Job, r.Finished, err
}

// untilDeadline shortens a wait so that the server answers (finished or
// not) a little before ctx's deadline, rather than the call failing.
func untilDeadline(ctx context.Context, wait time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d) - 100*time.Millisecond; left < wait {
			wait = max(left, time.Millisecond)
		}
	}
	return min(wait, protocol.MaxWaitMs*time.Millisecond)
}

// Poll reads retained output of a job from a byte cursor.
//
// In push mode (the default) a running job polled is then followed on
// the event socket, in the background, into a local buffer (up to
// LocalPollBytes of its newest output, from the poll's cursor on), and
// its later polls are answered from there without asking the
// supervisor when the cursor is within what is held: the same chunks,
// next and more as the supervisor's, at most the event socket's latency
// behind. LocalPollJobs jobs are followed at once: the least recently
// polled one makes room if it was not polled for 5 s (else the new one
// is not followed), and one not polled for a minute is let go. The job
// info of a local answer follows the job's events: state, pid, attempt,
// start, end (reason, exit code, signal, error: only once all of the
// output is there), output end, byte counts, last seq; other fields are
// as when following began (a resize, a kill's exiting state, readiness
// and usage are not seen: ask Status). A job that ended is answered
// locally until it is let go (also after a remove). A finished job, a
// cursor outside what is held, a job whose following failed (a service,
// once its supervision ended) and poll mode ask the supervisor.
func (c *Client) Poll(ctx context.Context, jobID string, cursor, maxBytes int64) (protocol.PollResult, error) {
	if err := ctx.Err(); err != nil {
		return protocol.PollResult{}, err // (as a remote poll would: a local answer must not hide it)
	}
	if r, ok := c.local.answer(jobID, cursor, maxBytes); ok {
		return r, nil
	}
	var r protocol.PollResult
	err := c.Call(ctx, protocol.OpPoll, &protocol.PollArgs{JobID: jobID, Cursor: cursor, MaxBytes: maxBytes}, &r)
	if err == nil {
		c.local.follow(jobID, r)
	}
	return r, err
}

// Kill terminates a job (signal "" = SIGTERM, grace, SIGKILL) or sends it a signal.
func (c *Client) Kill(ctx context.Context, jobID, signal string) (protocol.KillResult, error) {
	var r protocol.KillResult
	err := c.Call(ctx, protocol.OpKill, &protocol.KillArgs{JobID: jobID, Signal: signal}, &r)
	return r, err
}

// Status returns one job.
func (c *Client) Status(ctx context.Context, jobID string) (protocol.JobInfo, error) {
	if jobID == "" {
		return protocol.JobInfo{}, protocol.Errorf(protocol.CodeInvalidArgument, "jobId is required")
	}
	var r protocol.StatusResult
	if err := c.Call(ctx, protocol.OpStatus, &protocol.JobArgs{JobID: jobID}, &r); err != nil {
		return protocol.JobInfo{}, err
	}
	if r.Job == nil {
		return protocol.JobInfo{}, fmt.Errorf("status of %s: reply has no job", jobID)
	}
	return *r.Job, nil
}

// ListJobs lists jobs, optionally filtered by state and session, oldest
// first: every one of them (from args.After, if set), asking for one page
// after another (of at most args.Limit jobs, if set; see ListJobsPage).
func (c *Client) ListJobs(ctx context.Context, args protocol.ListJobsArgs) ([]protocol.JobInfo, error) {
	var all []protocol.JobInfo
	for {
		r, err := c.ListJobsPage(ctx, args)
		if err != nil {
			return all, err
		}
		all = append(all, r.Jobs...)
		if !r.More {
			return all, nil
		}
		if len(r.Jobs) == 0 || r.Next == "" || r.Next == args.After {
			return all, fmt.Errorf("list-jobs: the supervisor said more jobs follow but gave no way on (next %q after %q)", r.Next, args.After)
		}
		args.After = r.Next
	}
}

// ListJobsPage asks for one page of jobs: the first, or the one after
// args.After (the Next of the previous page), of at most args.Limit jobs
// (0: as many as fit in about protocol.MaxListBytes). The result's More
// says whether more follow. A supervisor older than paging returns every
// job at once, More false.
func (c *Client) ListJobsPage(ctx context.Context, args protocol.ListJobsArgs) (protocol.ListJobsResult, error) {
	var r protocol.ListJobsResult
	err := c.Call(ctx, protocol.OpListJobs, &args, &r)
	return r, err
}

// Health checks the supervisor.
func (c *Client) Health(ctx context.Context) (protocol.HealthResult, error) {
	var r protocol.HealthResult
	err := c.Call(ctx, protocol.OpHealth, nil, &r)
	return r, err
}

// Remove forgets a finished job.
func (c *Client) Remove(ctx context.Context, jobID string) error {
	return c.Call(ctx, protocol.OpRemove, &protocol.JobArgs{JobID: jobID}, nil)
}

// Subscribe fetches retained events of a job from seq from. At most a few
// run at once per Client; the others wait their turn (bounded by ctx).
func (c *Client) Subscribe(ctx context.Context, jobID string, from uint64, limit int) (protocol.SubscribeResult, error) {
	select {
	case c.backfills <- struct{}{}:
		defer func() { <-c.backfills }()
	case <-ctx.Done():
		return protocol.SubscribeResult{}, ctx.Err()
	}
	rep, err := c.call(ctx, protocol.OpSubscribe, &protocol.SubscribeArgs{JobID: jobID, FromSeq: from, Limit: limit}, 0)
	if err != nil {
		return protocol.SubscribeResult{}, err
	}
	if !rep.OK {
		return protocol.SubscribeResult{}, rep.Error
	}
	// The events' output aliases the reply (no copy of megabytes).
	r, err := protocol.DecodeSubscribeResult(rep.Result)
	if err != nil {
		return protocol.SubscribeResult{}, err
	}
	return *r, nil
}

// StartService runs a service job (spawned with a restart policy) again:
// at once if it is waiting for its restart delay, from scratch with its
// recorded spec if it ended (restart-limit, stopped, a clean exit). A
// running service is left as it is.
func (c *Client) StartService(ctx context.Context, jobID string) (protocol.JobInfo, error) {
	return c.jobOp(ctx, protocol.OpStart, jobID)
}

// Restart ends a service job's current run gracefully and starts the next
// at once (backoff reset); a service that is not running is started.
func (c *Client) Restart(ctx context.Context, jobID string) (protocol.JobInfo, error) {
	return c.jobOp(ctx, protocol.OpRestart, jobID)
}

func (c *Client) jobOp(ctx context.Context, op protocol.Op, jobID string) (protocol.JobInfo, error) {
	var r protocol.StatusResult
	if err := c.Call(ctx, op, &protocol.JobArgs{JobID: jobID}, &r); err != nil {
		return protocol.JobInfo{}, err
	}
	if r.Job == nil {
		return protocol.JobInfo{}, fmt.Errorf("%s %s: reply has no job", op, jobID)
	}
	return *r.Job, nil
}

// Stop ends a job gracefully (TERM, grace, KILL) with reason stopped; a
// service is not restarted.
func (c *Client) Stop(ctx context.Context, jobID string) (protocol.KillResult, error) {
	var r protocol.KillResult
	err := c.Call(ctx, protocol.OpStop, &protocol.JobArgs{JobID: jobID}, &r)
	return r, err
}

// History returns a job's ended runs (oldest first) with their last
// output lines.
func (c *Client) History(ctx context.Context, jobID string) ([]protocol.RunRecord, error) {
	var r protocol.HistoryResult
	err := c.Call(ctx, protocol.OpHistory, &protocol.JobArgs{JobID: jobID}, &r)
	return r.Runs, err
}
