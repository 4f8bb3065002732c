package zmtp

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
)

// Router is a ZMTP 3 ROUTER socket of our own on the hardened listener,
// for the control plane. Every peer (REQ, DEALER or ROUTER) has a reader
// and a writer of its own: replies to one peer never wait for another, and
// a peer whose unsent replies exceed the queue bound is disconnected, as
// is the peer with the most replies waiting behind the one being written
// when those of all peers together exceed Policy.ReplyQueueBytes.
type Router struct {
	l        *hardenedListener
	policy   *Policy
	maxQueue int
	budget   *replyBudget
	in       chan Incoming
	done     chan struct{}
	// handler, once set, receives messages on the peers' reader
	// goroutines instead of Recv.
	handler atomic.Pointer[func(Incoming)]

	mu     sync.Mutex
	peers  map[*Peer]struct{}
	closed bool
	wg     sync.WaitGroup
}

// SetHandler makes every peer's reader pass its messages to h (on the
// reader's goroutine) instead of queueing them for Recv. The peer's next
// message waits for h: h should hand the work on unless the message is
// Alone. Messages queued before are still returned by Recv.
func (r *Router) SetHandler(h func(Incoming)) { r.handler.Store(&h) }

// Incoming is one message from a peer.
type Incoming struct {
	Peer   *Peer
	Frames [][]byte
	// Alone is set (for a handler, see SetHandler) when nothing else of
	// the peer's is in flight and the reader has nothing buffered behind
	// this message (it does not look into the kernel's socket buffer: a
	// message that arrived just behind, or behind a message larger than
	// the reader's 4 KiB buffer, is not seen). The peer is then most
	// likely waiting for this reply, and a quick message may as well be
	// handled on the reader's goroutine.
	Alone bool
}

// maxMessageFrames bounds the frames of one incoming message.
const maxMessageFrames = 16

// DefaultPeerQueueBytes is a Router peer's bound on unsent replies when
// ListenRouter is given 0. (A single reply is taken whatever its size when
// nothing else waits for the peer.)
const DefaultPeerQueueBytes = 32 << 20

// ListenRouter opens a Router on endpoint with policy p; each peer may have
// up to queueBytes of unsent replies (0: DefaultPeerQueueBytes), all peers
// together p.ReplyQueueBytes.
func ListenRouter(ctx context.Context, endpoint string, p *Policy, queueBytes int) (*Router, error) {
	l, pol, err := listenHardened(endpoint, p, []string{"REQ", "DEALER", "ROUTER"})
	if err != nil {
		return nil, err
	}
	if queueBytes <= 0 {
		queueBytes = DefaultPeerQueueBytes
	}
	r := &Router{l: l, policy: pol, maxQueue: queueBytes, in: make(chan Incoming, 256), done: make(chan struct{}), peers: map[*Peer]struct{}{}}
	r.budget = &replyBudget{max: int64(pol.ReplyQueueBytes), reason: "reply-queue-total", queues: r.queues}
	evict := r.evictIdle
	l.evict.Store(&evict)
	r.wg.Add(1)
	go r.acceptLoop()
	return r, nil
}

// listenHardened opens a hardened listener without the engine.
func listenHardened(endpoint string, p *Policy, peerTypes []string) (*hardenedListener, *Policy, error) {
	scheme, addr, err := Split(endpoint)
	if err != nil {
		return nil, nil, err
	}
	network := "tcp"
	shared := p != nil && len(p.AllowUIDs)+len(p.AllowGIDs) > 0
	if scheme == "ipc" {
		network = "unix"
		if err := removeStaleSocket(addr); err != nil {
			return nil, nil, err
		}
		if dir := filepath.Dir(addr); dir == statedir.RuntimeDir() {
			if shared {
				return nil, nil, fmt.Errorf("%s: other users (allowed uids/gids) cannot reach a socket in the default runtime directory %s, which stays private (0700); give an ipc path in a directory of its own, e.g. ipc:///run/exec-supervisor/control.sock", endpoint, dir)
			}
			if err := statedir.EnsurePrivate(dir); err != nil {
				return nil, nil, err
			}
		} else if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("create directory of %s: %w", endpoint, err)
		} else if err := statedir.Check(dir, true); err != nil {
			// (another user could move our socket away and bind theirs)
			return nil, nil, fmt.Errorf("directory of %s: %w", endpoint, err)
		}
	}
	if p == nil {
		p = &Policy{}
	}
	pol := *p
	pol.fill()
	pol.peerTypes = peerTypes
	inner, err := net.Listen(network, addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", endpoint, err)
	}
	l := &hardenedListener{inner: inner, policy: &pol, ready: make(chan net.Conn), done: make(chan struct{})}
	if scheme == "ipc" {
		if shared {
			if err := shareSocket(addr, &pol); err != nil {
				inner.Close()
				return nil, nil, fmt.Errorf("listen on %s: %w", endpoint, err)
			}
		} else {
			_ = os.Chmod(addr, 0o600)
			unshareDir(filepath.Dir(addr), &pol)
			warnOpenWay(filepath.Dir(addr), &pol)
		}
		// The file is removed at Close only if it is still the one bound
		// here: a supervisor started on the same endpoint after this one
		// stopped listening (while it finished shutting down) owns the
		// file at that path now. (net's own unlink does not look.)
		if ul, ok := inner.(*net.UnixListener); ok {
			ul.SetUnlinkOnClose(false)
			if fi, err := os.Lstat(addr); err == nil {
				l.sockPath, l.sockFile = addr, fi
			}
		}
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, &pol, nil
}

// Addr returns the bound address.
func (r *Router) Addr() net.Addr { return r.l.Addr() }

// QueuedBytes is what waits to be written to all peers together.
func (r *Router) QueuedBytes() int64 { return r.budget.total.Load() }

// Peers is the number of connected peers.
func (r *Router) Peers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.peers)
}

func (r *Router) queues() []*outQueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	qs := make([]*outQueue, 0, len(r.peers))
	for p := range r.peers {
		qs = append(qs, p.outQueue)
	}
	return qs
}

// evictIdle closes the peer idle the longest, if one has been idle for
// IdleEvictAfter, to make room for a new connection (see Policy.MaxConns).
func (r *Router) evictIdle(string) bool {
	if r.policy.IdleEvictAfter < 0 {
		return false
	}
	limit := time.Now().Add(-r.policy.IdleEvictAfter).UnixNano()
	type cand struct {
		p     *Peer
		since int64
	}
	r.mu.Lock()
	cands := make([]cand, 0, len(r.peers))
	for p := range r.peers {
		if since := p.idleSince(); since <= limit {
			cands = append(cands, cand{p, since})
		}
	}
	r.mu.Unlock()
	// Idle the longest first (claimIdle checks each again: it may have
	// become busy meanwhile).
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(a.since, b.since) })
	for _, c := range cands {
		if p := c.p; p.claimIdle(limit) {
			r.policy.reject("evicted-idle", p.c.peer(),
				fmt.Errorf("idle for %v, given up for a new connection at the limit of %d", time.Since(time.Unix(0, p.last.Load())).Round(time.Millisecond), r.policy.MaxConns))
			// Say so (nothing is being written to it: it was idle), so that
			// a request it sent meanwhile, which is not handled, can be sent
			// again elsewhere.
			_ = p.c.Conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			r.l.sendErrorCmd(p.c.Conn, IdleEvicted)
			p.close()
			return true
		}
	}
	return false
}

// Recv returns the next message from any peer.
func (r *Router) Recv() (Incoming, error) {
	select {
	case m := <-r.in:
		return m, nil
	case <-r.done:
		return Incoming{}, net.ErrClosed
	}
}

// Send queues frames as one message to peer. It never blocks; a peer past
// its queue bound is disconnected instead (and an error returned).
func (r *Router) Send(p *Peer, frames [][]byte) error {
	return p.send(frames)
}

// Close disconnects every peer and stops listening.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	peers := make([]*Peer, 0, len(r.peers))
	for p := range r.peers {
		peers = append(peers, p)
	}
	r.mu.Unlock()
	err := r.l.Close()
	r.l.wg.Wait()
	for _, p := range peers {
		p.close()
	}
	r.wg.Wait()
	return err
}

func (r *Router) acceptLoop() {
	defer r.wg.Done()
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		hc := c.(*hardenedConn)
		r.wg.Add(1)
		go r.serve(hc)
	}
}

func (r *Router) serve(c *hardenedConn) {
	defer r.wg.Done()
	if err := handshake(c, r.policy, "ROUTER"); err != nil {
		if !c.rejected { // (else counted with its reason)
			r.policy.reject("handshake", c.peer(), err)
		}
		c.Close()
		return
	}
	p := &Peer{r: r, slots: make(chan struct{}, maxPeerInFlight)}
	p.touch()
	p.outQueue = newOutQueue(c, r.maxQueue, "slow-peer-queue", func() {
		r.mu.Lock()
		delete(r.peers, p)
		r.mu.Unlock()
	})
	p.outQueue.budget = r.budget
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.Close()
		return
	}
	r.peers[p] = struct{}{}
	r.mu.Unlock()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); p.writeLoop() }()
	p.readLoop()
	p.close()
}

// handshake completes the server side of the ZMTP handshake on a
// connection the hardened listener pre-read (greeting and first command
// are in its replay buffer): READY for NULL, or WELCOME / INITIATE / READY
// for PLAIN, announcing sockType; for CURVE, READY (curveAccept did the
// rest).
func handshake(c *hardenedConn, pol *Policy, sockType string) error {
	if c.curveHS != nil { // (done up to INITIATE: see curveAccept)
		return c.curveReady(sockType)
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(pol.HandshakeTimeout))
	var g [greetingLen]byte
	if _, err := io.ReadFull(c, g[:]); err != nil {
		return err
	}
	flags, body, err := readFrame(c, c.parser.max)
	if err != nil {
		return err
	}
	if flags&flagCommand == 0 {
		return errors.New("expected a command")
	}
	if c.mech == mechPlain {
		if err := writeCommand(c, cmdWelcome, nil); err != nil {
			return err
		}
		flags, body, err = readFrame(c, c.parser.max)
		if err != nil {
			return err
		}
		if name, _ := cmdName(body); flags&flagCommand == 0 || name != cmdInitiate {
			return fmt.Errorf("expected INITIATE, got %q", name)
		}
	}
	if !c.parser.handshakeDone {
		return errors.New("peer's final handshake command was not accepted")
	}
	_ = c.Conn.SetReadDeadline(time.Time{})
	return writeCommand(c, cmdReady, metadata("Socket-Type", sockType))
}

// Peer is one connection of a Router.
type Peer struct {
	*outQueue
	r *Router
	// slots bounds this peer's messages handed out by Recv and not yet
	// Released: a peer flooding requests only ever waits on itself.
	slots chan struct{}

	// For eviction of idle peers (Router.evictIdle): amu orders a
	// message's arrival against the peer being claimed for eviction.
	amu     sync.Mutex
	evicted bool         // under amu: claimed; its reader takes nothing more
	busy    atomic.Int32 // messages read and not yet Released
	holds   atomic.Int32 // Hold minus Unhold
	last    atomic.Int64 // unix nanoseconds of the last activity
}

// Hold tells the Router that a reply to this peer is held (a wait):
// the peer is not idle until Unhold, and is never evicted meanwhile.
func (p *Peer) Hold() { p.holds.Add(1) }

// Unhold ends a Hold.
func (p *Peer) Unhold() {
	p.holds.Add(-1)
	p.touch()
}

func (p *Peer) touch() { p.last.Store(time.Now().UnixNano()) }

// idleSince is when the peer's last activity was, or the far future when
// it is busy (a message in flight, a held reply, replies being written).
func (p *Peer) idleSince() int64 {
	if p.busy.Load() > 0 || p.holds.Load() > 0 || p.held.Load() > 0 {
		return 1<<63 - 1
	}
	return p.last.Load()
}

// claimIdle marks the peer evicted if it is still idle since before
// limit; its reader takes no message after that.
func (p *Peer) claimIdle(limit int64) bool {
	p.amu.Lock()
	defer p.amu.Unlock()
	if p.evicted || p.idleSince() > limit || p.Closed() {
		return false
	}
	p.evicted = true
	return true
}

// maxPeerInFlight bounds one peer's requests being handled at once.
const maxPeerInFlight = 16

// Release tells the Router that a message from this peer has been handled
// (every Incoming must be released once).
func (p *Peer) Release() {
	select {
	case <-p.slots:
		p.touch()
		p.busy.Add(-1)
	default:
	}
}

// Gone is closed when the peer is gone.
func (p *Peer) Gone() <-chan struct{} { return p.done }

// OnGone arranges for f to run (in a goroutine of its own) once the peer
// is gone, at once if it is already. stop cancels that; it reports false
// when f has run or is running.
func (p *Peer) OnGone(f func()) (stop func() bool) { return context.AfterFunc(p.gone, f) }

// Closed reports whether the peer is gone (its messages need no answer).
func (p *Peer) Closed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Peer) send(frames [][]byte) error {
	wire, size := encodeMessage(frames)
	if !p.enqueue(wire, size) {
		return errors.New("peer disconnected (closed, or too slow to read its replies)")
	}
	return nil
}

// readLoop turns frames into messages for the Router's Recv.
func (p *Peer) readLoop() {
	var frames [][]byte
	// Buffered: a request's frames usually come in one read, not one
	// read per frame header and body.
	br := bufio.NewReaderSize(p.c, 4096)
	for {
		flags, body, err := p.c.readMsgFrame(br)
		if err != nil {
			return
		}
		if flags&flagCommand != 0 {
			continue // PING and the like: nothing to do
		}
		frames = append(frames, body)
		if len(frames) > maxMessageFrames {
			p.r.policy.reject("protocol-violation", p.c.peer(), fmt.Errorf("message of more than %d frames", maxMessageFrames))
			return
		}
		if flags&flagMore != 0 {
			continue
		}
		p.amu.Lock()
		if p.evicted {
			p.amu.Unlock()
			return
		}
		p.busy.Add(1)
		p.touch()
		p.amu.Unlock()
		select {
		case p.slots <- struct{}{}:
		case <-p.done:
			return
		case <-p.r.done:
			return
		}
		if h := p.r.handler.Load(); h != nil {
			(*h)(Incoming{Peer: p, Frames: frames, Alone: br.Buffered() == 0 && len(p.slots) == 1})
			frames = nil
			continue
		}
		select {
		case p.r.in <- Incoming{Peer: p, Frames: frames}:
		case <-p.done:
			return
		case <-p.r.done:
			return
		}
		frames = nil
	}
}

// widenedNote is the file, beside the sockets, in which shareSocket notes
// the directory's permissions before it made the directory searchable.
const widenedNote = ".exec-supervisor-widened"

// unshareDir takes back the search permission shareSocket gave dir for
// allowed peers, now that none are (a start without --allow-*): only the
// bits it added, as its note says, and only on a directory nobody else
// can change.
func unshareDir(dir string, p *Policy) {
	note := filepath.Join(dir, widenedNote)
	f, err := os.OpenFile(note, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	b, _ := io.ReadAll(io.LimitReader(f, 64))
	f.Close()
	orig, err := strconv.ParseUint(strings.TrimSpace(string(b)), 8, 32)
	di, serr := os.Stat(dir)
	if err != nil || serr != nil || statedir.Check(dir, true) != nil {
		return
	}
	perm := di.Mode().Perm()
	if added := perm & 0o011 &^ os.FileMode(orig); added != 0 {
		keep := di.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky)
		if err := os.Chmod(dir, keep&^added); err != nil {
			return
		}
		if p.Log != nil {
			p.Log("socket directory closed to other users again (no --allow-uid/--allow-gid)", "dir", dir, "mode", fmt.Sprintf("%o", perm&^added))
		}
	}
	_ = os.Remove(note)
}

// warnOpenWay logs when a directory above the private socket directory
// dir lets others rename what is in it: someone could move dir away and
// put theirs in its place. Clients refuse a socket directory that is not
// their user's (see CheckPeerDir), so what they could do is keep clients
// out, not get in: a warning, not a refusal.
func warnOpenWay(dir string, p *Policy) {
	if p.Log == nil {
		return
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		if err := statedir.Check(d, true); err != nil {
			p.Log("others could replace the socket directory (clients would then refuse to connect); keep sockets under directories only root or this user can write", "dir", real, "err", err)
			return
		}
		if d == filepath.Dir(d) {
			return
		}
	}
}

// shareSocket opens the ipc socket at addr (and the way to it) to the
// policy's allowed uids and gids; who actually gets in is still decided
// per connection (SO_PEERCRED, checkPeer). One allowed gid and no uid:
// the socket is group-owned by it, mode 0660; otherwise mode 0666. Its
// directory gets search permission (g+x when it is that group's, else
// o+x; nobody else may list or write it; setgid and sticky bits kept).
// Widening permissions by path is safe only on a path nobody else can
// change: every directory from the root to the socket must be root's or
// ours and not writable by others (unless sticky), or a user who can
// rename one could swap in a directory of theirs, with a symlink named
// like the socket, and have us open their pick of our files. A directory
// above that others cannot search is reported (the allowed peers cannot
// connect) but not changed: it is not ours to open.
func shareSocket(addr string, p *Policy) error {
	real, err := filepath.EvalSymlinks(filepath.Dir(addr))
	if err != nil {
		return fmt.Errorf("resolve the socket's directory: %w", err)
	}
	for d := real; ; d = filepath.Dir(d) {
		if err := statedir.Check(d, true); err != nil {
			return fmt.Errorf("other users could change the way to the socket, so it is not opened to them (--allow-uid/--allow-gid): %w; put it in a directory under root-owned ones, e.g. /run/exec-supervisor", err)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	sock := filepath.Join(real, filepath.Base(addr))
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("the socket %s is not there any more (%v)", sock, err)
	}
	mode := os.FileMode(0o666)
	oneGID := len(p.AllowUIDs) == 0 && len(p.AllowGIDs) == 1
	if oneGID {
		if err := os.Lchown(sock, -1, p.AllowGIDs[0]); err != nil {
			return fmt.Errorf("give the socket to group %d (--allow-gid): %w", p.AllowGIDs[0], err)
		}
		mode = 0o660
	}
	if err := os.Chmod(sock, mode); err != nil {
		return fmt.Errorf("open the socket to allowed peers: %w", err)
	}
	di, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", real, err)
	}
	search := os.FileMode(0o011)
	if st, ok := di.Sys().(*syscall.Stat_t); ok && oneGID && int(st.Gid) == p.AllowGIDs[0] {
		search = 0o010
	}
	if perm := di.Mode().Perm(); perm&search != search {
		keep := di.Mode() & (os.ModePerm | os.ModeSetgid | os.ModeSticky)
		// What it was is noted beside the sockets, so that a start
		// without --allow-* can take back what this added (see
		// unshareDir); an earlier note (its first widening) is kept.
		if f, err := os.OpenFile(filepath.Join(real, widenedNote), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600); err == nil {
			_, _ = fmt.Fprintf(f, "%o\n", perm)
			f.Close()
		}
		if err := os.Chmod(real, keep|search); err != nil {
			return fmt.Errorf("let allowed peers search %s: %w", real, err)
		}
		if p.Log != nil {
			p.Log("socket directory made searchable by other users (--allow-uid/--allow-gid)", "dir", real, "mode", fmt.Sprintf("%o", perm|search))
		}
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 && p.Log != nil {
			p.Log("allowed peers (--allow-uid/--allow-gid) cannot reach the socket: a directory above it is closed to other users", "socket", addr, "dir", d, "mode", fmt.Sprintf("%o", fi.Mode().Perm()))
			break
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return nil
}
