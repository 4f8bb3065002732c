package server

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of the /metrics HTTP server. Its listener is loopback by
// default but open to every local user: without them, one who opens
// connections and leaves them idle after a request holds a descriptor of
// ours each for as long as it likes, and at RLIMIT_NOFILE spawns and
// control connections fail for everyone.
const (
	// metricsIdleTimeout is how long a keep-alive connection may wait for
	// its next request (Prometheus, scraping every 15 s or more, opens a
	// new one each time anyway).
	metricsIdleTimeout = 5 * time.Second
	// metricsReadTimeout bounds reading a request (its headers: 5 s),
	// metricsWriteTimeout writing the reply to a client that reads slowly.
	metricsReadTimeout  = 10 * time.Second
	metricsWriteTimeout = 10 * time.Second
	// metricsMaxHeaderBytes: a scrape's request is a few hundred bytes.
	metricsMaxHeaderBytes = 8 << 10
)

// newMetricsServer serves h with the bounds above, idle keep-alive
// connections given up after idle (0: metricsIdleTimeout).
func newMetricsServer(h http.Handler, idle time.Duration) *http.Server {
	if idle <= 0 {
		idle = metricsIdleTimeout
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       metricsReadTimeout,
		WriteTimeout:      metricsWriteTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    metricsMaxHeaderBytes,
	}
}

// limitListener lets at most max connections be open at once. One more
// is closed as soon as it is accepted, so its descriptor goes back at
// once and nothing waits in a queue, and counted by refused.
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused func()
}

func newLimitListener(l net.Listener, max int, refused func()) *limitListener {
	return &limitListener{Listener: l, max: int64(max), refused: refused}
}

// Accept returns the next connection within the limit; the ones past it
// are closed and counted without returning (an error is the listener's).
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			_ = c.Close()
			if l.refused != nil {
				l.refused()
			}
			continue
		}
		return &limitConn{Conn: c, l: l}, nil
	}
}

// limitConn gives its slot back when closed (once, however often Close is
// called).
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
