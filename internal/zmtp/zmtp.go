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
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
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

// DefaultControl and DefaultEvent are the default endpoints.
func DefaultControl() string { return "ipc://" + filepath.Join(statedir.RuntimeDir(), "control.sock") }

// DefaultEvent is the default event endpoint.
func DefaultEvent() string { return "ipc://" + filepath.Join(statedir.RuntimeDir(), "events.sock") }

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

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
