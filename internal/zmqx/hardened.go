package zmqx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-zeromq/zmq4"
	"golang.org/x/sys/unix"
)

// Policy is how a hardened listener treats its peers. Zero values mean the
// documented defaults.
type Policy struct {
	// Token, when set, requires ZMTP PLAIN with this password (any user
	// name) on every connection (but see LoopbackUIDs); without it the
	// NULL mechanism is used.
	Token string
	// LoopbackUIDs admits without Token the tcp peers on loopback that
	// run as our uid or one of AllowUIDs, as the kernel tells from their
	// socket (tcpPeerUID) when the connection is accepted: our greeting
	// offers them NULL, everyone else PLAIN. (ZMTP greetings are sent
	// before either side knows the other's mechanism: the server's must
	// be chosen per peer before it hears anything but its signature.)
	// AllowGIDs do not count: the socket tells its uid only.
	LoopbackUIDs bool
	// AllowUIDs and AllowGIDs extend who may connect to an ipc endpoint,
	// besides the supervisor's own uid (checked with SO_PEERCRED).
	AllowUIDs, AllowGIDs []int
	// HandshakeTimeout bounds the greeting and security handshake; 0 means 5 s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds every write to a peer; a peer that does not read
	// for this long is disconnected. 0 means 5 s.
	WriteTimeout time.Duration
	// MaxFrameBytes bounds any frame a peer may send, checked before the
	// engine allocates it. 0 means 2 MiB.
	MaxFrameBytes uint64
	// MaxConns bounds established (handshaken, authenticated)
	// connections; 0 means 1024. A peer that completes the handshake at
	// the limit takes the place of a connection the socket gives up (a
	// Router: the control connection idle the longest, see
	// IdleEvictAfter; a Publisher: the oldest subscriber of the peer
	// holding the most); else, if it runs as our own uid (ipc; tcp on
	// loopback), one of OwnReserve more slots; else it is refused with a
	// ZMTP ERROR saying "too many connections".
	MaxConns int
	// MaxHandshakes bounds connections still in the handshake; 0 means
	// MaxConns. At the limit a new connection displaces the one in the
	// handshake whose peer has kept it waiting the longest (the oldest
	// last progress: bytes received), so that peers that stall in it,
	// however many, cannot keep out peers that finish it, which make
	// progress every round trip.
	MaxHandshakes int
	// OwnReserve is how many connections past MaxConns a peer of our own
	// uid may take when nothing can be given up, so that the operator can
	// always look in; 0 means 8, negative none.
	OwnReserve int
	// IdleEvictAfter is how long a Router's peer must have been idle
	// (nothing in flight, no reply waiting to be written, no held wait:
	// see Peer.Hold) to be evicted for a new connection at MaxConns; 0
	// means 10 s, negative never evicts.
	IdleEvictAfter time.Duration
	// ReplyQueueBytes bounds the unsent replies of all of a Router's peers
	// together: past it the peer with the most waiting behind the reply it
	// is being sent is disconnected (see replyBudget). 0 means 256 MiB.
	ReplyQueueBytes int
	// OnReject, if set, is called with a short reason whenever a
	// connection is refused or cut off (for metrics).
	OnReject func(reason string)
	// Log, if set, receives one line per rejection.
	Log func(msg string, args ...any)
	// Debug, if set, receives one line per accepted connection.
	Debug func(msg string, args ...any)
	// OnDisconnect, if set, is called when an established peer (a
	// subscriber or a control client) goes away, for whatever reason.
	OnDisconnect func()

	peerTypes []string // socket types that may connect (set by Listen)
}

func (p *Policy) fill() {
	if p.HandshakeTimeout <= 0 {
		p.HandshakeTimeout = 5 * time.Second
	}
	if p.WriteTimeout <= 0 {
		p.WriteTimeout = 5 * time.Second
	}
	if p.MaxFrameBytes == 0 {
		p.MaxFrameBytes = 2 << 20
	}
	if p.MaxConns <= 0 {
		p.MaxConns = 1024
	}
	if p.MaxHandshakes <= 0 {
		p.MaxHandshakes = p.MaxConns
	}
	if p.OwnReserve == 0 {
		p.OwnReserve = DefaultOwnReserve
	}
	if p.IdleEvictAfter == 0 {
		p.IdleEvictAfter = 10 * time.Second
	}
	if p.ReplyQueueBytes <= 0 {
		p.ReplyQueueBytes = 256 << 20
	}
}

// DefaultOwnReserve is the default of Policy.OwnReserve.
const DefaultOwnReserve = 8

// TooManyConnections starts the ZMTP ERROR reason a connection refused at
// the connection limit gets.
const TooManyConnections = "too many connections"

// IdleEvicted is the ZMTP ERROR reason an idle connection given up for a
// newcomer (see Policy.MaxConns) gets: nothing it sent after its last
// reply was, or will be, handled, so a client may send it again on a
// new connection, whatever it was.
const IdleEvicted = "idle connection given up for a new one"

// mechanism names the mechanism PLAIN (plain) or NULL.
func mechanism(plain bool) string {
	if plain {
		return string(zmq4.PlainSecurity)
	}
	return string(zmq4.NullSecurity)
}

// loopbackPeer decides how a tcp peer on loopback is admitted (see
// LoopbackUIDs): plain says whether it must give the token, own whether
// it runs as our uid.
func (p *Policy) loopbackPeer(raw net.Conn) (plain, own bool) {
	plain = p.Token != ""
	uid, ok := tcpPeerUID(raw)
	if !ok {
		return plain, false
	}
	own = uid == os.Geteuid()
	if plain && p.LoopbackUIDs && (own || slices.Contains(p.AllowUIDs, uid)) {
		plain = false
	}
	return plain, own
}

// RejectReasons lists every reason Policy.OnReject may be called with
// (docs/metrics.md: connections_rejected_total).
func RejectReasons() []string {
	return []string{"too-many-connections", "handshake-displaced", "peer-credentials", "handshake-timeout-or-eof", "handshake-write", "bad-signature", "old-zmtp-version",
		"wrong-mechanism", "auth-failed", "frame-too-large", "protocol-violation", "incompatible-socket-type",
		"handshake", "slow-peer-write-timeout", "slow-peer-queue", "reply-queue-total", "slow-subscriber",
		"too-many-subscriptions", "evicted-idle", "evicted-busiest-peer"}
}

func (p *Policy) reject(reason string, remote string, err error) {
	if p.OnReject != nil {
		p.OnReject(reason)
	}
	if p.Log != nil {
		p.Log("connection rejected", "reason", reason, "remote", remote, "err", err)
	}
}

// hardenedListener accepts raw connections in its own loop, checks the
// peer, and runs the start of the ZMTP handshake (greeting and the first
// security command) in a goroutine per connection under a deadline. Only
// connections that got that far are handed to the engine's accept loop,
// so a silent or hostile peer never blocks anyone else.
type hardenedListener struct {
	inner  net.Listener
	policy *Policy
	ready  chan net.Conn
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup // accept loop and pre-handshakes
	// conns counts established connections (see admit).
	conns atomic.Int64
	// evict, when set, gives up one established connection to make room
	// for a new one from peer key (see Policy.MaxConns); it reports
	// whether it did (the connection is closed when it returns).
	evict atomic.Pointer[func(key string) bool]

	pmu sync.Mutex
	// pending are the connections in pre-handshake, each with the number
	// of its last progress (arrival, or bytes received: the lowest has
	// waited for its peer the longest); displaced are those closed to
	// make room for newer ones (see addPending), until their handshake
	// goroutine is done.
	pending   map[net.Conn]uint64
	displaced map[net.Conn]bool
	progress  uint64

	// sockPath and sockFile are an ipc listener's socket file as bound,
	// removed at Close if still the same file (see ListenRouter).
	sockPath string
	sockFile os.FileInfo
}

func (l *hardenedListener) Addr() net.Addr { return l.inner.Addr() }

// acceptFailLogEvery spaces the log lines of failing accepts (each retried
// after 10 ms).
const acceptFailLogEvery = 10 * time.Second

func (l *hardenedListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.inner.Close()
		if l.sockFile != nil {
			if fi, err := os.Lstat(l.sockPath); err == nil && os.SameFile(fi, l.sockFile) {
				_ = os.Remove(l.sockPath)
			}
		}
		l.pmu.Lock()
		for c := range l.pending {
			c.Close()
		}
		l.pmu.Unlock()
	})
	return err
}

// Accept returns the next connection that passed the pre-handshake.
func (l *hardenedListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		// Park instead of failing: the engine's accept loop spins on
		// errors until its context ends, which happens right after.
		return nil, net.ErrClosed
	}
}

func (l *hardenedListener) acceptLoop() {
	defer l.wg.Done()
	var lastLog time.Time // (of accept failures)
	failed := 0
	for {
		raw, err := l.inner.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off briefly rather than spin, and
			// say so (at most every acceptFailLogEvery): the peers wait
			// in the listen backlog meanwhile, and time out there.
			failed++
			if p := l.policy.Log; p != nil && time.Since(lastLog) >= acceptFailLogEvery {
				p("accepting connections fails; retrying every 10 ms (peers wait in the listen backlog)",
					"failures", failed, "err", err)
				lastLog, failed = time.Now(), 0
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		failed = 0 // (a line counts the failures of one episode)
		remote := raw.RemoteAddr().String()
		key := remote
		if ta, ok := raw.RemoteAddr().(*net.TCPAddr); ok {
			key = ta.IP.String()
		}
		// own says whether the peer runs as our uid (asked only at the
		// limit, see admit, or when its mechanism depends on it): over
		// tcp only a loopback peer can tell, from the socket table.
		var ownOnce sync.Once
		var plain, isOwn bool
		tcpPeer := func() { ownOnce.Do(func() { plain, isOwn = l.policy.loopbackPeer(raw) }) }
		own := func() bool { tcpPeer(); return isOwn }
		mech := func() bool {
			if l.policy.Token == "" || !l.policy.LoopbackUIDs {
				return l.policy.Token != ""
			}
			tcpPeer()
			return plain
		}
		if uc, ok := raw.(*net.UnixConn); ok {
			pid, uid, err := l.checkPeer(uc)
			if err != nil {
				raw.Close()
				l.policy.reject("peer-credentials", peerName(uc), err)
				continue
			}
			key = fmt.Sprintf("pid %d", pid)
			remote = key // (its later refusals name it too)
			own = func() bool { return uid == os.Geteuid() }
			mech = func() bool { return l.policy.Token != "" }
		}
		if !l.addPending(raw) {
			raw.Close()
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			plain := mech()
			// (an admitted loopback peer may still bring the token:
			// its own mechanism decides, see preHandshake)
			adaptive := !plain && l.policy.Token != ""
			l.preHandshake(raw, remote, key, own, plain, adaptive)
			l.pmu.Lock()
			delete(l.pending, raw)
			delete(l.displaced, raw)
			l.pmu.Unlock()
		}()
	}
}

// addPending records raw as in the handshake, first closing the one in
// it whose peer has kept it waiting the longest when MaxHandshakes are
// (that one is displaced: its handshake goroutine counts it so). It
// reports false once the listener is closed.
func (l *hardenedListener) addPending(raw net.Conn) bool {
	l.pmu.Lock()
	defer l.pmu.Unlock()
	select {
	case <-l.done:
		return false
	default:
	}
	if l.pending == nil {
		l.pending, l.displaced = map[net.Conn]uint64{}, map[net.Conn]bool{}
	}
	if len(l.pending) >= l.policy.MaxHandshakes {
		var oldest net.Conn
		first := uint64(math.MaxUint64)
		for c, n := range l.pending {
			if n < first {
				oldest, first = c, n
			}
		}
		delete(l.pending, oldest)
		l.displaced[oldest] = true
		oldest.Close()
	}
	l.progress++
	l.pending[raw] = l.progress
	return true
}

// progressed notes that raw's peer sent what its handshake waited for.
func (l *hardenedListener) progressed(raw net.Conn) {
	l.pmu.Lock()
	if _, ok := l.pending[raw]; ok {
		l.progress++
		l.pending[raw] = l.progress
	}
	l.pmu.Unlock()
}

// peerName names an ipc peer by its pid ("pid N"; "@" when unknown).
func peerName(c *net.UnixConn) string {
	name := "@"
	if sc, err := c.SyscallConn(); err == nil {
		_ = sc.Control(func(fd uintptr) {
			if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
				name = fmt.Sprintf("pid %d", cred.Pid)
			}
		})
	}
	return name
}

// checkPeer accepts the supervisor's own uid and the allowed uids/gids;
// it returns the peer's pid and uid.
func (l *hardenedListener) checkPeer(c *net.UnixConn) (pid, uid int, err error) {
	sc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	var groups []int
	if err := sc.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		if cerr == nil && len(l.policy.AllowGIDs) > 0 {
			groups = peerGroups(int(fd))
		}
	}); err != nil {
		return 0, 0, err
	}
	if cerr != nil {
		return 0, 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	pid, uid = int(cred.Pid), int(cred.Uid)
	if uid == os.Geteuid() || slices.Contains(l.policy.AllowUIDs, uid) {
		return pid, uid, nil
	}
	for _, g := range l.policy.AllowGIDs {
		if int(cred.Gid) == g || slices.Contains(groups, g) {
			return pid, uid, nil
		}
	}
	return 0, 0, fmt.Errorf("peer pid %d uid %d gid %d (groups %v) is not allowed", cred.Pid, cred.Uid, cred.Gid, groups)
}

// peerGroups returns the supplementary groups the peer of the unix socket
// fd had when it connected (SO_PEERGROUPS, Linux 4.13; none where the
// kernel lacks it: the primary gid is then all that is checked).
func peerGroups(fd int) []int {
	buf := make([]uint32, 64)
	for range 3 {
		n := uint32(len(buf) * 4)
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), syscall.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch errno {
		case 0:
			out := make([]int, 0, n/4)
			for _, g := range buf[:n/4] {
				out = append(out, int(g))
			}
			return out
		case syscall.ERANGE: // (n is now the size needed)
			if n/4 > 1<<16 { // (NGROUPS_MAX is 65536)
				return nil
			}
			buf = make([]uint32, n/4+1)
		default:
			return nil
		}
	}
	return nil
}

// admit takes a slot for a connection that completed the pre-handshake:
// a free one of MaxConns, else one the socket gives up (evict), else, for
// a peer of our own uid (own, asked only then), one of the OwnReserve past
// MaxConns. It reports false when there is none.
func (l *hardenedListener) admit(key string, own func() bool) bool {
	if l.take(l.policy.MaxConns, key) {
		return true
	}
	return l.policy.OwnReserve > 0 && own() && l.take(l.policy.MaxConns+l.policy.OwnReserve, key)
}

// take takes one of limit slots: a free one, else one the socket gives up
// (evict, up to 3 times), but only while giving one up makes room: with
// the operator's reserve in use (more than MaxConns established), an
// eviction for a peer that may not use it would only cut a connection off.
func (l *hardenedListener) take(limit int, key string) bool {
	for try := 0; try < 3; try++ {
		if n := l.conns.Add(1); n <= int64(limit) {
			return true
		}
		if l.conns.Add(-1) > int64(limit) {
			return false
		}
		ev := l.evict.Load()
		if ev == nil || !(*ev)(key) {
			return false
		}
	}
	return false
}

const (
	greetingLen  = 64
	signatureLen = 10
	flagMore     = 0x01
	flagLong     = 0x02
	flagCommand  = 0x04
)

// preHandshake reads the peer's greeting and first command under the
// handshake deadline, answering the signature itself (libzmq peers wait for
// it before sending the rest). PLAIN credentials are checked here, so only
// authenticated peers reach the engine.
//
// own says whether the peer runs as our uid (see admit); plain whether
// it must authenticate with PLAIN (else NULL: see LoopbackUIDs);
// adaptive, for a peer LoopbackUIDs admits, that its own mechanism
// decides: NULL, or PLAIN with the token (a libzmq client configured with
// it fails on a server greeting of another mechanism). Our greeting then
// goes in two parts: signature and major version, upon which libzmq
// peers send the rest of theirs (zmq4 peers send theirs whole at once),
// then, once the peer's mechanism is read, the rest with the same one.
// A peer that sends no mechanism within greetingPeek (one that waits for
// ours first) is offered NULL.
func (l *hardenedListener) preHandshake(raw net.Conn, remote, key string, own func() bool, plain, adaptive bool) {
	fail := func(reason string, err error) {
		l.pmu.Lock()
		if l.displaced[raw] { // (closed for a newer one: whatever failed)
			reason = "handshake-displaced"
		}
		l.pmu.Unlock()
		// (counted before the peer can see the connection closed)
		l.policy.reject(reason, remote, err)
		raw.Close()
	}
	_ = raw.SetReadDeadline(time.Now().Add(l.policy.HandshakeTimeout))
	_ = raw.SetWriteDeadline(time.Now().Add(l.policy.HandshakeTimeout))
	buf := make([]byte, greetingLen, greetingLen+64)
	if _, err := io.ReadFull(raw, buf[:signatureLen]); err != nil {
		fail("handshake-timeout-or-eof", err)
		return
	}
	l.progressed(raw)
	if buf[0] != 0xFF || buf[9]&0x01 != 0x01 {
		fail("bad-signature", nil)
		return
	}
	// Answer with our whole greeting at once: libzmq sends its version
	// byte only after our signature and the rest only after our version;
	// zmq4 peers wait for all 64 bytes. The engine's own greeting is
	// swallowed (see hardenedConn.Write).
	got := signatureLen
	if adaptive {
		if _, err := raw.Write(greeting(false)[:signatureLen+1]); err != nil {
			fail("handshake-write", err)
			return
		}
		_ = raw.SetReadDeadline(time.Now().Add(min(greetingPeek, l.policy.HandshakeTimeout)))
		n, err := io.ReadFull(raw, buf[signatureLen:32])
		got += n
		var ne net.Error
		switch {
		case err == nil:
			plain = strings.TrimRight(string(buf[12:32]), "\x00") == string(zmq4.PlainSecurity)
		case errors.As(err, &ne) && ne.Timeout():
			plain = false // (a peer waiting for our mechanism)
		default:
			fail("handshake-timeout-or-eof", err)
			return
		}
		_ = raw.SetReadDeadline(time.Now().Add(l.policy.HandshakeTimeout))
		if _, err := raw.Write(greeting(plain)[signatureLen+1:]); err != nil {
			fail("handshake-write", err)
			return
		}
	} else if _, err := raw.Write(greeting(plain)); err != nil {
		fail("handshake-write", err)
		return
	}
	if _, err := io.ReadFull(raw, buf[got:]); err != nil {
		fail("handshake-timeout-or-eof", err)
		return
	}
	l.progressed(raw)
	if buf[10] < 3 {
		fail("old-zmtp-version", fmt.Errorf("ZMTP %d.%d", buf[10], buf[11]))
		return
	}
	mech := strings.TrimRight(string(buf[12:32]), "\x00")
	if mech != mechanism(plain) {
		l.sendErrorCmd(raw, "security mechanism "+mechanism(plain)+" required")
		fail("wrong-mechanism", fmt.Errorf("peer offered %q", mech))
		return
	}
	// The first command: READY (NULL) or HELLO (PLAIN).
	var hdr [9]byte
	if _, err := io.ReadFull(raw, hdr[:2]); err != nil {
		fail("handshake-timeout-or-eof", err)
		return
	}
	l.progressed(raw)
	if hdr[0]&flagCommand == 0 {
		fail("protocol-violation", errors.New("first frame is not a command"))
		return
	}
	hlen := 2
	size := uint64(hdr[1])
	if hdr[0]&flagLong != 0 {
		if _, err := io.ReadFull(raw, hdr[2:9]); err != nil {
			fail("handshake-timeout-or-eof", err)
			return
		}
		hlen = 9
		size = binary.BigEndian.Uint64(hdr[1:9])
	}
	if size > 4096 {
		fail("frame-too-large", fmt.Errorf("handshake command of %d bytes", size))
		return
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(raw, body); err != nil {
		fail("handshake-timeout-or-eof", err)
		return
	}
	name, rest := cmdName(body)
	if plain {
		if name != zmq4.CmdHello || !plainBodyOK(rest, l.policy.Token) {
			l.sendErrorCmd(raw, AuthFailed)
			fail("auth-failed", nil)
			return
		}
	} else if name != zmq4.CmdReady {
		fail("protocol-violation", fmt.Errorf("expected READY, got %q", name))
		return
	}
	if !l.admit(key, own) {
		msg := fmt.Sprintf("%s: the limit of %d is reached and no connection could be given up", TooManyConnections, l.policy.MaxConns)
		l.sendErrorCmd(raw, msg)
		fail("too-many-connections", errors.New(msg))
		return
	}
	// Admitted: no longer in the handshake, so never displaced (it
	// holds a slot, maybe one an idle peer was given up for).
	l.pmu.Lock()
	delete(l.pending, raw)
	l.pmu.Unlock()
	pre := append(append(buf, hdr[:hlen]...), body...)
	if l.policy.Debug != nil {
		l.policy.Debug("connection accepted", "remote", remote, "mechanism", mech)
	}
	c := &hardenedConn{Conn: raw, l: l, replay: pre, peerKey: key, plain: plain}
	if sc, ok := raw.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	c.parser = frameParser{max: l.policy.MaxFrameBytes, finalCmd: zmq4.CmdReady, peerTypes: l.policy.peerTypes}
	if plain {
		c.parser.finalCmd = zmq4.CmdInitiate
	}
	select {
	case l.ready <- c:
	case <-l.done:
		c.Close()
	}
}

// greetingPeek bounds how long a peer admitted by LoopbackUIDs may take
// to send its mechanism before ours is chosen for it (see preHandshake):
// libzmq and zmq4 peers send it as soon as they have our version.
const greetingPeek = 250 * time.Millisecond

// greeting is our greeting: signature, ZMTP 3.0, our mechanism (PLAIN if
// plain, else NULL), as-server (1 with PLAIN, whose server we are: RFC 23
// and 24; 0 with NULL, which has no server role), zero filler.
func greeting(plain bool) []byte {
	g := make([]byte, greetingLen)
	g[0], g[9] = 0xFF, 0x7F
	g[10], g[11] = 3, 0
	copy(g[12:32], mechanism(plain))
	if plain {
		g[32] = 1
	}
	return g
}

// sendErrorCmd sends a ZMTP ERROR command (after our greeting), so that a
// refused libzmq peer learns why.
func (l *hardenedListener) sendErrorCmd(raw net.Conn, reason string) {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	body := append([]byte{byte(len(zmq4.CmdError))}, zmq4.CmdError...)
	body = append(append(body, byte(len(reason))), reason...)
	_, _ = raw.Write(append([]byte{flagCommand, byte(len(body))}, body...))
}

func cmdName(body []byte) (string, []byte) {
	if len(body) == 0 || int(body[0]) > len(body)-1 {
		return "", nil
	}
	n := int(body[0])
	return string(body[1 : 1+n]), body[1+n:]
}

// hardenedConn is what the engine sees: it replays the pre-read handshake
// bytes, swallows the signature the engine writes (already sent), enforces
// the frame size limit on everything the peer sends before the engine can
// allocate for it, bounds every write, and turns any violation or write
// timeout into a closed connection.
type hardenedConn struct {
	net.Conn
	l *hardenedListener
	// peerKey names the peer for per-peer decisions: "pid N" over ipc,
	// the IP address over tcp.
	peerKey string
	// plain says the peer authenticates with PLAIN (else NULL).
	plain     bool
	replay    []byte
	parser    frameParser
	closeOnce sync.Once
	wmu       sync.Mutex
	// deadlineSet is when the write deadline was last moved (under wmu).
	deadlineSet time.Time
	// raw is the socket's descriptor access for non-blocking writes (nil
	// if the connection has none).
	raw syscall.RawConn
	// rejected is set when Read refused the peer (and counted why): the
	// handshake that fails on it then counts nothing more. (Read and the
	// handshake run on the one goroutine of the connection's serve.)
	rejected bool
}

// peer names the peer in logs: its address over tcp, its pid over ipc
// (where the address is empty, "@").
func (c *hardenedConn) peer() string {
	if _, unix := c.Conn.(*net.UnixConn); unix && c.peerKey != "" {
		return c.peerKey
	}
	return c.RemoteAddr().String()
}

func (c *hardenedConn) Read(p []byte) (int, error) {
	var n int
	if len(c.replay) > 0 {
		n = copy(p, c.replay)
		c.replay = c.replay[n:]
	} else {
		var err error
		n, err = c.Conn.Read(p)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.l.policy.reject("handshake-timeout-or-eof", c.peer(), err)
				c.rejected = true
				c.Close()
				return 0, io.EOF
			}
			if n == 0 {
				return 0, err
			}
		}
	}
	if err := c.parser.feed(p[:n]); err != nil {
		reason := "protocol-violation"
		if v, ok := err.(*violation); ok {
			reason = v.reason
		}
		c.l.policy.reject(reason, c.peer(), err)
		c.rejected = true
		c.Close()
		return 0, io.EOF
	}
	if c.parser.handshakeDone && !c.parser.deadlineCleared {
		c.parser.deadlineCleared = true
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
	return n, nil
}

func (c *hardenedConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	total := len(p)
	// The peer must make progress: each chunk gets WriteTimeout. The
	// deadline moves at most every quarter timeout, so small writes on the
	// fast path skip the timer update; a peer that reads nothing is cut off
	// after 3/4 to 4/4 of WriteTimeout.
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), 256<<10)]
		c.refreshWriteDeadline()
		n, err := c.Conn.Write(chunk)
		written += n
		p = p[n:]
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.l.policy.reject("slow-peer-write-timeout", c.peer(), err)
			}
			c.Close()
			return written, io.EOF
		}
	}
	return total, nil
}

// refreshWriteDeadline moves the write deadline WriteTimeout ahead, at
// most every quarter timeout. c.wmu must be held.
func (c *hardenedConn) refreshWriteDeadline() {
	if now := time.Now(); now.Sub(c.deadlineSet) > c.l.policy.WriteTimeout/4 {
		_ = c.Conn.SetWriteDeadline(now.Add(c.l.policy.WriteTimeout))
		c.deadlineSet = now
	}
}

// writeBuffers writes bufs with one writev where possible, under the same
// progress deadline as Write; progress, if set, is told the bytes of each
// write done (at most 1 MiB at a time).
func (c *hardenedConn) writeBuffers(bufs net.Buffers, progress func(int)) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for len(bufs) > 0 {
		c.refreshWriteDeadline()
		// Bound one writev so that the deadline is refreshed on progress.
		var chunk net.Buffers
		n := 0
		// (a large buffer is split: bufs is the caller's own slice, the
		// bytes are not touched)
		for len(bufs) > 0 && n < 1<<20 {
			b := bufs[0]
			if room := 1<<20 - n; len(b) > room {
				chunk = append(chunk, b[:room])
				n += room
				bufs[0] = b[room:]
				continue
			}
			chunk = append(chunk, b)
			n += len(b)
			bufs = bufs[1:]
		}
		if _, err := chunk.WriteTo(c.Conn); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.l.policy.reject("slow-peer-write-timeout", c.peer(), err)
			}
			c.Close()
			return err
		}
		if progress != nil {
			progress(n)
		}
	}
	return nil
}

// tryWriteBuffers writes what the socket takes of bufs now, with one
// writev that never waits, and returns what it did not take.
func (c *hardenedConn) tryWriteBuffers(bufs net.Buffers) (net.Buffers, error) {
	if c.raw == nil {
		return bufs, nil // the writer goroutine does it
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	iov := bufs
	if len(iov) > maxIOV {
		iov = iov[:maxIOV]
	}
	// The deadline applies to this write too (an expired one would fail
	// it), though it never waits.
	c.refreshWriteDeadline()
	var n int
	var werr error
	if err := c.raw.Write(func(fd uintptr) bool {
		for {
			n, werr = unix.Writev(int(fd), iov)
			if werr != unix.EINTR {
				return true // done either way: never wait here
			}
		}
	}); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return bufs, nil // not the peer's doing: the writer retries
		}
		c.Close()
		return nil, err
	}
	switch {
	case werr == unix.EAGAIN:
		return bufs, nil
	case werr != nil:
		c.Close()
		return nil, werr
	}
	// bufs may be shared (a message fanned out to several subscribers):
	// the rest is a new slice, the buffers themselves are not touched.
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if n > 0 {
		bufs = append(net.Buffers{bufs[0][n:]}, bufs[1:]...)
	}
	return bufs, nil
}

// maxIOV bounds the buffers of one writev (the kernel's IOV_MAX).
const maxIOV = 1024

func (c *hardenedConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		err = c.Conn.Close()
		c.l.conns.Add(-1)
	})
	return err
}

// frameParser follows the ZMTP 3 byte stream a peer sends: the 64-byte
// greeting, then frames (flags, 1- or 8-byte size, body). It rejects a
// frame larger than max as soon as its size is known. During the
// handshake it collects each command and, at the command that ends the
// peer's side of the handshake (READY or INITIATE), checks its metadata:
// well formed, with a Socket-Type the engine accepts. (The engine drops,
// without closing, a connection it refuses at that point.)
type frameParser struct {
	max             uint64
	finalCmd        string
	peerTypes       []string
	pos             uint64 // bytes of the greeting consumed
	hdr             [9]byte
	hdrN, hdrLen    int
	remain          uint64 // body bytes left in the current frame
	isCmd           bool
	cmd             []byte // the current handshake command's body
	handshakeDone   bool
	deadlineCleared bool
}

const maxHandshakeCmd = 4096

func (f *frameParser) feed(b []byte) error {
	for len(b) > 0 {
		if f.pos < greetingLen {
			k := min(uint64(len(b)), greetingLen-f.pos)
			f.pos += k
			b = b[k:]
			continue
		}
		if f.remain > 0 {
			k := min(uint64(len(b)), f.remain)
			if f.isCmd && !f.handshakeDone {
				f.cmd = append(f.cmd, b[:k]...)
			}
			f.remain -= k
			b = b[k:]
			if f.remain == 0 && f.isCmd && !f.handshakeDone {
				if err := f.command(); err != nil {
					return err
				}
			}
			continue
		}
		// Frame header.
		if f.hdrN == 0 {
			f.hdr[0] = b[0]
			f.hdrN = 1
			f.hdrLen = 2
			if b[0]&flagLong != 0 {
				f.hdrLen = 9
			}
			b = b[1:]
			continue
		}
		k := min(len(b), f.hdrLen-f.hdrN)
		copy(f.hdr[f.hdrN:], b[:k])
		f.hdrN += k
		b = b[k:]
		if f.hdrN < f.hdrLen {
			continue
		}
		size := uint64(f.hdr[1])
		if f.hdrLen == 9 {
			size = binary.BigEndian.Uint64(f.hdr[1:9])
		}
		if size > f.max {
			return &violation{"frame-too-large", fmt.Errorf("peer announced a frame of %d bytes; the limit is %d", size, f.max)}
		}
		f.isCmd = f.hdr[0]&flagCommand != 0
		f.hdrN = 0
		f.remain = size
		if f.isCmd && !f.handshakeDone {
			if size > maxHandshakeCmd {
				return &violation{"frame-too-large", fmt.Errorf("handshake command of %d bytes", size)}
			}
			f.cmd = f.cmd[:0]
			if size == 0 {
				if err := f.command(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// command checks a complete handshake command.
func (f *frameParser) command() error {
	name, props := cmdName(f.cmd)
	if name != f.finalCmd {
		return nil
	}
	meta, err := parseMetadata(props)
	if err != nil {
		return &violation{"protocol-violation", err}
	}
	if len(f.peerTypes) > 0 {
		st := meta["socket-type"]
		ok := false
		for _, t := range f.peerTypes {
			ok = ok || t == st
		}
		if !ok {
			return &violation{"incompatible-socket-type", fmt.Errorf("peer socket type %.32q cannot talk to this socket (want one of %v)", st, f.peerTypes)}
		}
	}
	f.handshakeDone = true
	return nil
}

// parseMetadata reads ZMTP metadata: [name len][name][4-byte value len][value]...
func parseMetadata(b []byte) (map[string]string, error) {
	m := map[string]string{}
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+4 {
			return nil, errors.New("truncated metadata")
		}
		name := strings.ToLower(string(b[1 : 1+n]))
		b = b[1+n:]
		vl := binary.BigEndian.Uint32(b[:4])
		b = b[4:]
		if uint64(vl) > uint64(len(b)) {
			return nil, errors.New("truncated metadata value")
		}
		m[name] = string(b[:vl])
		b = b[vl:]
	}
	return m, nil
}

// violation is a peer's protocol violation with the reason it is counted under.
type violation struct {
	reason string
	err    error
}

func (v *violation) Error() string { return v.reason + ": " + v.err.Error() }
