package zmtp

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
	// mech is the peer's security mechanism.
	mech mech
	// curveHS is a CURVE peer's handshake until the engine's side sends
	// READY; curve then boxes and unboxes its frames (see readMsgFrame,
	// outQueue.enqueue).
	curveHS   *curveServerHandshake
	curve     *curveCodec
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
