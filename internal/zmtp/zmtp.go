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
// It is the whole of ZeroMQ the supervisor and its clients link: nothing
// here imports another ZeroMQ library. github.com/go-zeromq/zmq4 is the
// reference peer this ZMTP is tested against, from the test helper
// package zmq4peer, which production code never imports.
package zmtp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
)

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

// DefaultControl and DefaultEvent are the default endpoints.
func DefaultControl() string { return "ipc://" + filepath.Join(statedir.RuntimeDir(), "control.sock") }

// DefaultEvent is the default event endpoint.
func DefaultEvent() string { return "ipc://" + filepath.Join(statedir.RuntimeDir(), "events.sock") }
