package zmtp

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Policy is how a hardened listener treats its peers. Zero values mean the
// documented defaults.
type Policy struct {
	// Token, when set, requires ZMTP PLAIN with this password (any user
	// name) on every connection (but see LoopbackUIDs); without it the
	// NULL mechanism is used.
	Token string
	// Curve, when set, requires ZMTP CURVE (RFC 26) instead, with clients
	// of its allow-list (but see LoopbackUIDs: a peer it admits may also
	// choose NULL, or PLAIN with Token). For tcp endpoints.
	Curve *CurveServer
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

// mech is a ZMTP security mechanism, as greetings name it.
type mech string

// The mechanisms (RFC 23, 24, 26).
const (
	mechNull  mech = "NULL"
	mechPlain mech = "PLAIN"
	mechCurve mech = "CURVE"
)

// The names of the ZMTP commands we send or expect (RFC 23, 24, 26).
const (
	cmdHello     = "HELLO"
	cmdWelcome   = "WELCOME"
	cmdInitiate  = "INITIATE"
	cmdReady     = "READY"
	cmdError     = "ERROR"
	cmdSubscribe = "SUBSCRIBE"
	cmdCancel    = "CANCEL"
)

// required is the mechanism every peer must use (but see LoopbackUIDs):
// CURVE with Curve, else PLAIN with Token, else NULL.
func (p *Policy) required() mech {
	switch {
	case p.Curve != nil:
		return mechCurve
	case p.Token != "":
		return mechPlain
	}
	return mechNull
}

// loopbackPeer decides how a tcp peer on loopback is admitted (see
// LoopbackUIDs): m is the mechanism it must use (NULL: its own choice),
// own whether it runs as our uid.
func (p *Policy) loopbackPeer(raw net.Conn) (m mech, own bool) {
	m = p.required()
	uid, ok := tcpPeerUID(raw)
	if !ok {
		return m, false
	}
	own = uid == os.Geteuid()
	if m != mechNull && p.LoopbackUIDs && (own || slices.Contains(p.AllowUIDs, uid)) {
		m = mechNull
	}
	return m, own
}

// RejectReasons lists every reason Policy.OnReject may be called with
// (docs/metrics.md: connections_rejected_total).
func RejectReasons() []string {
	return []string{"too-many-connections", "handshake-displaced", "peer-credentials", "handshake-timeout-or-eof", "handshake-write", "bad-signature", "old-zmtp-version",
		"wrong-mechanism", "auth-failed", "frame-too-large", "protocol-violation", "incompatible-socket-type",
		"handshake", "slow-peer-write-timeout", "slow-peer-queue", "reply-queue-total", "slow-subscriber",
		"too-many-subscriptions", "evicted-idle", "evicted-busiest-peer",
		"curve-protocol", "curve-hello", "curve-initiate", "curve-replay", "curve-bad-box", "curve-unknown-client"}
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
		var m mech
		var isOwn bool
		tcpPeer := func() { ownOnce.Do(func() { m, isOwn = l.policy.loopbackPeer(raw) }) }
		own := func() bool { tcpPeer(); return isOwn }
		mechOf := func() mech {
			if l.policy.required() == mechNull || !l.policy.LoopbackUIDs {
				return l.policy.required()
			}
			tcpPeer()
			return m
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
			mechOf = func() mech { // (CURVE is for tcp)
				if l.policy.Token != "" {
					return mechPlain
				}
				return mechNull
			}
		}
		if !l.addPending(raw) {
			raw.Close()
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			m := mechOf()
			// (an admitted loopback peer may still bring the token or
			// a CURVE key: its own mechanism decides, see preHandshake)
			adaptive := m == mechNull && l.policy.required() != mechNull
			if _, unix := raw.(*net.UnixConn); unix {
				adaptive = false
			}
			l.preHandshake(raw, remote, key, own, m, adaptive)
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
