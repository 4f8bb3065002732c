// Package zmq4peer is github.com/go-zeromq/zmq4, the reference peer our
// ZMTP (internal/zmtp) is tested against: its sockets as tests and
// benchmarks dial the supervisor with (DEALER, REQ, SUB), the bare sockets
// benchmark baselines listen with, and the client side of PLAIN for them.
// Tests and benchmarks only: no production package imports it (the
// dependency tests in pkg/client and cmd hold that line), and it imports
// nothing of this module, so internal/zmtp's own tests can use it too.
package zmq4peer

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Socket is a zmq4 socket.
type Socket = zmq4.Socket

// Msg is a multipart ZeroMQ message.
type Msg = zmq4.Msg

// SocketType is a ZeroMQ socket type.
type SocketType = zmq4.SocketType

// The socket types tests use.
const (
	Router = zmq4.Router // for baselines; the supervisor's is zmtp.ListenRouter
	Dealer = zmq4.Dealer
	Pub    = zmq4.Pub // for baselines; the supervisor's is zmtp.ListenPub
	Sub    = zmq4.Sub
	Req    = zmq4.Req
	Rep    = zmq4.Rep
)

// NewMsg builds a multipart message from frames.
func NewMsg(frames ...[]byte) Msg { return zmq4.NewMsgFrom(frames...) }

// OptionSubscribe is the SUB socket option that adds a topic prefix.
const OptionSubscribe = zmq4.OptionSubscribe

// Dial opens a socket of type typ connected to endpoint, failing after
// timeout (5s if not positive) when nothing answers. It never reconnects
// by itself.
func Dial(ctx context.Context, typ SocketType, endpoint string, timeout time.Duration) (Socket, error) {
	return DialToken(ctx, typ, endpoint, timeout, "")
}

// DialToken is Dial authenticating with ZMTP PLAIN and token when token is
// not empty.
func DialToken(ctx context.Context, typ SocketType, endpoint string, timeout time.Duration, token string) (Socket, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	opts := []zmq4.Option{zmq4.WithDialerTimeout(timeout), zmq4.WithDialerMaxRetries(0), zmq4.WithAutomaticReconnect(false)}
	if token != "" {
		opts = append(opts, zmq4.WithSecurity(PlainClient(token)))
	}
	s, err := newSocket(ctx, typ, opts...)
	if err != nil {
		return nil, err
	}
	if err := s.Dial(endpoint); err != nil {
		s.Close()
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	return s, nil
}

// ListenBare opens a plain zmq4 socket listening on endpoint, without any
// of the supervisor's checks. It exists for benchmark baselines only.
func ListenBare(ctx context.Context, typ SocketType, endpoint string) (Socket, error) {
	s, err := newSocket(ctx, typ)
	if err != nil {
		return nil, err
	}
	if err := s.Listen(endpoint); err != nil {
		s.Close()
		return nil, fmt.Errorf("listen on %s: %w", endpoint, err)
	}
	return s, nil
}

// newSocket makes a zmq4 socket of type typ that logs nothing.
func newSocket(ctx context.Context, typ SocketType, opts ...zmq4.Option) (Socket, error) {
	opts = append([]zmq4.Option{zmq4.WithLogger(log.New(io.Discard, "", 0))}, opts...)
	switch typ {
	case Router:
		return zmq4.NewRouter(ctx, opts...), nil
	case Dealer:
		return zmq4.NewDealer(ctx, opts...), nil
	case Pub:
		return zmq4.NewPub(ctx, opts...), nil
	case Sub:
		return zmq4.NewSub(ctx, opts...), nil
	case Req:
		return zmq4.NewReq(ctx, opts...), nil
	case Rep:
		return zmq4.NewRep(ctx, opts...), nil
	}
	return nil, fmt.Errorf("zmq4peer: unsupported socket type %v", typ)
}
