// Package zmtp is the one place that speaks ZeroMQ: our own ZMTP 3.x,
// both sides. The server side is a hardened listener that checks peers
// (SO_PEERCRED, PLAIN passwords, CURVE keys, handshake deadline, frame
// limits, socket types), a ROUTER and a PUB with a reader and a bounded
// writer per peer; the client side (DialClient) is a DEALER or SUB
// connection of the same code, recreated by its users rather than
// reconnected behind their back. CURVE (RFC 26) is ours too, both sides
// (curve*.go), on golang.org/x/crypto's NaCl boxes: no primitive is
// written here. It also parses endpoints, cleans up stale ipc socket
// files and resolves the private default endpoints.
//
// github.com/go-zeromq/zmq4 is the reference peer our ZMTP is tested
// against: the zmq4 sockets (Dial, DialToken, ListenBare) are for tests
// and benchmarks only.
package zmtp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Socket is a ZeroMQ socket.
type Socket = zmq4.Socket

// Msg is a multipart ZeroMQ message.
type Msg = zmq4.Msg

// Socket types used by exec-supervisor.
const (
	RouterType = zmq4.Router // for baselines; our server side is ListenRouter
	Dealer     = zmq4.Dealer
	Pub        = zmq4.Pub
	Sub        = zmq4.Sub
	Req        = zmq4.Req
	Rep        = zmq4.Rep
)

// NewMsg builds a multipart message from frames.
func NewMsg(frames ...[]byte) Msg { return zmq4.NewMsgFrom(frames...) }

// OptionSubscribe is the SUB socket option that adds a topic prefix.
const OptionSubscribe = zmq4.OptionSubscribe

// Split parses "scheme://address" into its parts; only tcp and ipc are
// accepted.
func Split(endpoint string) (scheme, addr string, err error) {
	scheme, addr, ok := strings.Cut(endpoint, "://")
	if !ok || addr == "" {
		return "", "", fmt.Errorf("endpoint %q: want tcp://HOST:PORT or ipc:///path/to.sock", endpoint)
	}
	switch scheme {
	case "tcp":
		_, port, err := net.SplitHostPort(addr)
		if err != nil || port == "" {
			return "", "", fmt.Errorf("endpoint %q: want tcp://HOST:PORT: %v", endpoint, err)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return "", "", fmt.Errorf("endpoint %q: port %q is not a number 0..65535", endpoint, port)
		}
	case "ipc":
		if addr == "" || strings.HasSuffix(addr, "/") {
			// (a directory's path: listening made it, then failed, and
			// the directory stayed in the way of the next start)
			return "", "", fmt.Errorf("endpoint %q: want ipc:///path/to.sock, a socket file's path (not a directory's)", endpoint)
		}
		if !strings.HasPrefix(addr, "/") && !strings.HasPrefix(addr, "@") {
			// Relative paths work but depend on the cwd: accept them.
			if strings.ContainsRune(addr, 0) {
				return "", "", fmt.Errorf("endpoint %q: NUL in path", endpoint)
			}
		}
	default:
		return "", "", fmt.Errorf("endpoint %q: unsupported scheme %q (use tcp:// or ipc://)", endpoint, scheme)
	}
	return scheme, addr, nil
}

func newSocket(ctx context.Context, typ zmq4.SocketType, opts ...zmq4.Option) Socket {
	opts = append([]zmq4.Option{zmq4.WithLogger(discardLogger())}, opts...)
	switch typ {
	case RouterType:
		return zmq4.NewRouter(ctx, opts...)
	case Dealer:
		return zmq4.NewDealer(ctx, opts...)
	case Pub:
		return zmq4.NewPub(ctx, opts...)
	case Sub:
		return zmq4.NewSub(ctx, opts...)
	case Req:
		return zmq4.NewReq(ctx, opts...)
	case Rep:
		return zmq4.NewRep(ctx, opts...)
	}
	panic(fmt.Sprintf("zmtp: unsupported socket type %v", typ))
}

// removeStaleSocket removes path if it is a unix socket nobody answers on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket: refusing to replace it", path)
	}
	c, err := net.DialTimeout("unix", path, 500*time.Millisecond)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by another process (is a supervisor already running?)", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// Dial opens a socket of type typ connected to endpoint, failing after
// timeout when nothing answers. It never reconnects by itself.
func Dial(ctx context.Context, typ zmq4.SocketType, endpoint string, timeout time.Duration) (Socket, error) {
	return DialToken(ctx, typ, endpoint, timeout, "")
}

// DialToken is Dial authenticating with ZMTP PLAIN and token when token is
// not empty.
func DialToken(ctx context.Context, typ zmq4.SocketType, endpoint string, timeout time.Duration, token string) (Socket, error) {
	if _, _, err := Split(endpoint); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	opts := []zmq4.Option{zmq4.WithDialerTimeout(timeout), zmq4.WithDialerMaxRetries(0), zmq4.WithAutomaticReconnect(false)}
	if token != "" {
		opts = append(opts, zmq4.WithSecurity(PlainClient(token)))
	}
	s := newSocket(ctx, typ, opts...)
	if err := s.Dial(endpoint); err != nil {
		s.Close()
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	return s, nil
}

// DefaultRuntimeDir is the directory of the default ipc endpoints:
// $XDG_RUNTIME_DIR/exec-supervisor when XDG_RUNTIME_DIR is set, else
// /tmp/exec-supervisor-<uid>.
func DefaultRuntimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "exec-supervisor")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("exec-supervisor-%d", os.Getuid()))
}

// DefaultControl and DefaultEvent are the default endpoints.
func DefaultControl() string { return "ipc://" + filepath.Join(DefaultRuntimeDir(), "control.sock") }

// DefaultEvent is the default event endpoint.
func DefaultEvent() string { return "ipc://" + filepath.Join(DefaultRuntimeDir(), "events.sock") }

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// EnsurePrivateDir creates dir with mode 0700 if missing and refuses one
// that is a symlink, is owned by another user, or is open to others.
func EnsurePrivateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("create private directory %s: %w", dir, err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	return checkPrivateInfo(dir, fi)
}

// UnsafePathError says a path that would be trusted (a socket or state
// directory, a token file) is not safe to use: someone other than us (or
// root) could change it or what is in it. Err says how.
type UnsafePathError struct {
	Path string
	Err  error
}

func (e *UnsafePathError) Error() string { return e.Err.Error() }

func (e *UnsafePathError) Unwrap() error { return e.Err }

// unsafePath returns an *UnsafePathError for path: "<path> <problem>".
func unsafePath(path, problem string, args ...any) error {
	return &UnsafePathError{Path: path, Err: fmt.Errorf("%s "+problem, append([]any{path}, args...)...)}
}

// checkPrivate is EnsurePrivateDir's check alone (it creates nothing).
func checkPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	return checkPrivateInfo(dir, fi)
}

func checkPrivateInfo(dir string, fi os.FileInfo) error {
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return unsafePath(dir, "is not a directory (or is a symlink): refusing to use it")
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Geteuid() {
		return unsafePath(dir, "is owned by uid %d, not by us (uid %d): refusing to use it", st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return unsafePath(dir, "has mode %o; it must be 0700 (chmod 700 %s)", UnixMode(fi), dir)
	}
	return nil
}

// UnixMode is fi's mode as chmod and ls show it, in octal with %o:
// permissions with the sticky, setgid and setuid bits (1777 for /tmp;
// os.FileMode.Perm leaves those out).
func UnixMode(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Mode & 0o7777
	}
	m := uint32(fi.Mode().Perm())
	if fi.Mode()&os.ModeSticky != 0 {
		m |= 0o1000
	}
	if fi.Mode()&os.ModeSetgid != 0 {
		m |= 0o2000
	}
	if fi.Mode()&os.ModeSetuid != 0 {
		m |= 0o4000
	}
	return m
}

// CheckDir refuses a directory whose contents someone other than us (or
// root) could change: a symlink or not a directory, owned by another user,
// or writable by group or others (unless sticky, as /tmp is, when sticky is
// allowed: then nobody else can rename or remove our files in it). It
// creates nothing.
func CheckDir(dir string, stickyOK bool) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", dir, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() {
		return unsafePath(dir, "is not a directory (or is a symlink): refusing to use it")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return unsafePath(dir, "is owned by uid %d, not by us (uid %d) or root: refusing to use it", st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o022 != 0 && !(stickyOK && fi.Mode()&os.ModeSticky != 0) {
		if fi.Mode()&os.ModeSticky != 0 {
			// (sticky: others cannot replace our files, but they can
			// take any name we have not made yet)
			return unsafePath(dir, "has mode %o: others can write to it (sticky: they cannot replace our files there, but can take the names of those not made yet); use a directory of your own", UnixMode(fi))
		}
		if stickyOK {
			return unsafePath(dir, "has mode %o: others could replace what is in it (chmod go-w %s; or chmod +t %s: sticky, as /tmp is)", UnixMode(fi), dir, dir)
		}
		return unsafePath(dir, "has mode %o: others could replace what is in it (chmod go-w %s)", UnixMode(fi), dir)
	}
	return nil
}

// CheckPeerDir is CheckDir (sticky allowed) for a client about to connect
// to a socket in dir, except that a directory owned by another user (a
// supervisor that lets us in with --allow-uid/--allow-gid) is accepted too
// when nobody but root or us could have made it: it is writable by its
// owner only, and its parent is root's or ours and writable by nobody
// else, sticky or not (in /tmp, anyone could have made it to receive our
// spawns).
func CheckPeerDir(dir string) error {
	err := CheckDir(dir, true)
	if err == nil {
		return nil
	}
	fi, lerr := os.Lstat(dir)
	if lerr != nil || fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() || st.Uid == 0 {
		return err // (refused for another reason)
	}
	// The way to it must be beyond anyone else's reach too (a directory
	// others can rename things in could hold a look-alike), symlinks
	// resolved: the parent without the sticky exception, the rest with.
	real, rerr := filepath.EvalSymlinks(filepath.Dir(dir))
	perr := rerr
	if rerr == nil {
		perr = CheckDir(real, false)
		for d := filepath.Dir(real); perr == nil; d = filepath.Dir(d) {
			perr = CheckDir(d, true)
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	if perr != nil {
		return &UnsafePathError{Path: dir, Err: fmt.Errorf("%s is owned by uid %d, not by us (uid %d) or root, and anyone could have made it there (%w): refusing to use it; a supervisor shared with other users keeps its sockets in a directory of its own under a root-owned one, e.g. /run/exec-supervisor", dir, st.Uid, os.Geteuid(), perr)}
	}
	return nil
}

// CheckOwnFile refuses a file (open as f, at path) that is not owned by us:
// what the supervisor reads back (journal, token) must be its own.
func CheckOwnFile(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return unsafePath(path, "is owned by uid %d, not by us (uid %d): refusing to trust it", st.Uid, os.Geteuid())
	}
	return nil
}

// ListenBare opens a plain zmq4 socket without the hardened transport. It
// exists for benchmark baselines only; never serve clients with it.
func ListenBare(ctx context.Context, typ zmq4.SocketType, endpoint string) (Socket, error) {
	s := newSocket(ctx, typ)
	if err := s.Listen(endpoint); err != nil {
		s.Close()
		return nil, fmt.Errorf("listen on %s: %w", endpoint, err)
	}
	return s, nil
}

// DefaultStateDir is the default state directory:
// $XDG_STATE_HOME/exec-supervisor, else ~/.local/state/exec-supervisor, else
// <DefaultRuntimeDir>/state.
func DefaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "exec-supervisor")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" && h != "/" {
		return filepath.Join(h, ".local", "state", "exec-supervisor")
	}
	return filepath.Join(DefaultRuntimeDir(), "state")
}

// DefaultTokenFile is where the supervisor keeps its tcp token by default.
func DefaultTokenFile() string { return filepath.Join(DefaultStateDir(), "token") }

// ReadToken reads a token file, refusing symlinks, files readable by
// others and files owned by another user (who would know the token).
func ReadToken(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	if err := CheckOwnFile(f, path); err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %o; it must not be accessible to others (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("read token %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || len(tok) > 255 {
		return "", fmt.Errorf("token file %s must hold 1..255 bytes", path)
	}
	return tok, nil
}
