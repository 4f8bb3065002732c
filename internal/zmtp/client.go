package zmtp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
)

// Client is one client-side ZMTP 3.0 connection of the kinds pkg/client
// uses: a DEALER talking to the supervisor's ROUTER, or a SUB listening to
// its PUB. Unlike the zmq4 engine it runs no goroutines of its own: Recv
// reads the next message on the caller's goroutine (one hop less per
// message on the spawn and output paths). Send is safe for concurrent use;
// Recv must be called from one goroutine at a time. Close unblocks Recv.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	// wsem serializes Sends (a semaphore, so that waiting for it can
	// give up with the caller's context).
	wsem chan struct{}
	// writeTimeout bounds one Send (a peer that stopped reading).
	writeTimeout time.Duration
	// curve boxes and unboxes frames on a CURVE connection (its sealing
	// under wsem, its opening in Recv).
	curve *curveCodec
}

// clientMaxFrame bounds a frame, clientMaxMessage a whole message, and
// clientMaxFrames the frames of one message that the client accepts (the
// supervisor sends at most 64 MiB per reply, refusing to send more, and
// two frames per event; more is a broken peer).
const (
	clientMaxFrame   = 64<<20 + 64<<10
	clientMaxMessage = 64<<20 + 64<<10
	clientMaxFrames  = 16
)

// DialClient connects to endpoint (ipc:// or tcp://) as a socketType peer
// ("DEALER" or "SUB") and completes the ZMTP handshake: mechanism NULL, or
// PLAIN with token as the password when token is not empty.
func DialClient(ctx context.Context, socketType, endpoint string, timeout time.Duration, token string) (*Client, error) {
	return DialClientWith(ctx, socketType, endpoint, DialOptions{Timeout: timeout, Token: token})
}

// DialOptions configure DialClientWith.
type DialOptions struct {
	Timeout time.Duration // connect and handshake (0: 5 s)
	Token   string        // PLAIN password ("": mechanism NULL)
	// TokenToOwnOnly sends Token only to a tcp listener on this machine
	// owned by our user (or root), as found in /proc/net/tcp{,6}: for a
	// token the client found by itself (the supervisor's default token
	// file), which must not go to whoever took the port while the
	// supervisor was down (PLAIN does not authenticate the server).
	// Such a token is also offered only to a server that asks for one: a
	// server without authentication gets mechanism NULL (a second
	// connection), where a token given explicitly is a *MechanismError.
	TokenToOwnOnly bool
	// Curve, when set, uses ZMTP CURVE on tcp (Token is then not used).
	Curve *CurveClient
}

// CurveClient is a client's CURVE setup: the server's public key, pinned
// (a server that does not hold its secret key is refused:
// ErrCurveServerKey), and the client's long-term key pair, whose public
// key the server's allow-list must hold.
type CurveClient struct {
	Server CurveKey
	Key    CurveKeyPair
}

// DialClientWith is DialClient with options.
func DialClientWith(ctx context.Context, socketType, endpoint string, o DialOptions) (*Client, error) {
	timeout, token := o.Timeout, o.Token
	scheme, addr, err := Split(endpoint)
	if err != nil {
		return nil, err
	}
	network := "tcp"
	if scheme == "ipc" {
		network = "unix"
		// The default directory's name says whose it is: anyone else's
		// (made in a shared TMPDIR before ours) is not our supervisor's.
		// Elsewhere, a directory others can write to lets them replace
		// the socket.
		dir := filepath.Dir(addr)
		var derr error
		if dir == statedir.RuntimeDir() {
			derr = statedir.CheckPrivate(dir)
		} else {
			derr = statedir.CheckPeer(dir)
		}
		if derr != nil && !errors.Is(derr, os.ErrNotExist) {
			return nil, fmt.Errorf("connect to %s: %w", endpoint, derr)
		}
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	c := &Client{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), writeTimeout: 10 * time.Second, wsem: make(chan struct{}, 1)}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	// ctx bounds the handshake too (a peer that accepts and never
	// answers; a caller that gives up, a client being closed).
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	if o.Curve != nil && network == "tcp" {
		err = c.curveHandshake(socketType, o.Curve)
	} else {
		err = c.handshake(socketType, token, o.TokenToOwnOnly, network == "tcp")
	}
	if !stop() { // (ctx ended: the deadline may have been cut meanwhile)
		err = errors.Join(ctx.Err(), err)
	}
	if errors.Is(err, errFoundTokenNotWanted) {
		// Our server runs without authentication: again, without the
		// token it found.
		conn.Close()
		o.Token, o.TokenToOwnOnly = "", false
		return DialClientWith(ctx, socketType, endpoint, o)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect to %s: %w", endpoint, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return c, nil
}

// exchangeGreeting sends our greeting for mechanism m (as the client) and
// returns the mechanism the server's greeting names.
func (c *Client) exchangeGreeting(m mech) (string, error) {
	g := greeting(m)
	g[32] = 0 // (as-server: we are the client)
	if _, err := c.conn.Write(g); err != nil {
		return "", fmt.Errorf("send greeting: %w", err)
	}
	return c.readGreeting()
}

// readGreeting reads the server's greeting and returns its mechanism.
func (c *Client) readGreeting() (string, error) {
	var peer [greetingLen]byte
	if _, err := io.ReadFull(c.r, peer[:]); err != nil {
		return "", fmt.Errorf("read greeting: %w", err)
	}
	if peer[0] != 0xFF || peer[9]&0x01 != 0x01 || peer[10] < 3 {
		return "", errors.New("the peer does not speak ZMTP 3")
	}
	return strings.TrimRight(string(peer[12:32]), "\x00"), nil
}

// RefusedError is a ZMTP ERROR command from the server: it refused the
// handshake, or ended the connection, and Reason says why (AuthFailed,
// one starting with TooManyConnections, IdleEvicted, ...).
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "server refused: " + e.Reason }

// AuthFailed is the reason of an ERROR refusing a PLAIN password.
const AuthFailed = "authentication failed"

// errFoundTokenNotWanted says a supervisor of ours wants no token where
// the client offered one it found by itself: it connects again without.
var errFoundTokenNotWanted = errors.New("the supervisor runs without authentication")

// MechanismError says the supervisor and the client do not agree on the
// ZMTP security mechanism: the supervisor wants a token the client does
// not have (Server PLAIN, Client NULL), or runs without authentication
// while the client was given a token (Server NULL, Client PLAIN).
type MechanismError struct {
	Server string // the supervisor's mechanism, from its greeting
	Client string // the one the client would use
}

func (e *MechanismError) Error() string {
	switch {
	case e.Server == "PLAIN" && e.Client == "NULL":
		return "the supervisor requires a token (ZMTP PLAIN) and none was given"
	case e.Server == "NULL" && e.Client == "PLAIN":
		return "the supervisor runs without authentication (ZMTP NULL), but a token was given"
	}
	return fmt.Sprintf("the supervisor wants security mechanism %s, not %s", e.Server, e.Client)
}

// handshake runs the ZMTP 3.0 greeting and security handshake. The
// client chooses its mechanism before it sees the server's and sends its
// whole greeting at once (a supervisor that admits loopback peers by uid
// lets the peer's mechanism decide, see Policy.LoopbackUIDs): NULL
// without a token, PLAIN with one given; with a token it found by itself
// (found), only a tcp server of our user or root on this machine
// (ownServer) is talked to at all. A server of another mechanism is
// a *MechanismError, but for a found token refused by our own server
// without authentication: errFoundTokenNotWanted (DialClientWith then
// connects again without it).
func (c *Client) handshake(socketType, token string, found, tcp bool) error {
	if token != "" && found {
		if !tcp {
			token = "" // (a found token is for tcp only)
		} else if err := ownServer(c.conn); err != nil {
			// A found token marks the endpoint as our own supervisor's:
			// another user's listener is refused whatever mechanism it
			// would offer (one that greets NULL must not get our
			// requests instead of the token).
			return fmt.Errorf("not sending the default token: %w (give the token explicitly if this is the supervisor you mean)", err)
		}
	}
	m := mechNull
	if token != "" {
		m = mechPlain
	}
	pm, err := c.exchangeGreeting(m)
	if err != nil {
		return err
	}
	if pm != string(m) {
		if found && token != "" && pm == "NULL" {
			return errFoundTokenNotWanted
		}
		return &MechanismError{Server: pm, Client: string(m)}
	}
	meta := metadata("Socket-Type", socketType)
	if token != "" {
		if len(token) > 255 {
			return errors.New("plain: the token must be at most 255 bytes")
		}
		const user = "exec-supervisor"
		hello := append([]byte{byte(len(user))}, user...)
		hello = append(append(hello, byte(len(token))), token...)
		if err := writeCommand(c.conn, cmdHello, hello); err != nil {
			return fmt.Errorf("plain: send HELLO: %w", err)
		}
		if err := c.expect(cmdWelcome); err != nil {
			return fmt.Errorf("plain: %w", err)
		}
		if err := writeCommand(c.conn, cmdInitiate, meta); err != nil {
			return fmt.Errorf("plain: send INITIATE: %w", err)
		}
	} else if err := writeCommand(c.conn, cmdReady, meta); err != nil {
		return fmt.Errorf("send READY: %w", err)
	}
	return c.expect(cmdReady)
}

// ownServer checks that the server end of conn, a tcp connection, is a
// socket of our uid or root on this machine: the socket that accepted us
// (on loopback, tcpPeerUID), else a listener on its address.
func ownServer(conn net.Conn) error {
	if uid, ok := tcpPeerUID(conn); ok {
		if uid != os.Geteuid() && uid != 0 {
			return fmt.Errorf("the server on %v runs as uid %d, not as us (uid %d) or root", conn.RemoteAddr(), uid, os.Geteuid())
		}
		return nil
	}
	return ownListener(conn.RemoteAddr())
}

// expect reads one command and fails unless it is name.
func (c *Client) expect(name string) error {
	got, body, err := c.readCommand()
	switch {
	case err != nil:
		return fmt.Errorf("waiting for %s: %w", name, err)
	case got == cmdError:
		return &RefusedError{Reason: errorReason(body)}
	case got != name:
		return fmt.Errorf("expected %s, got %q", name, got)
	}
	return nil
}

func (c *Client) readCommand() (string, []byte, error) {
	flags, body, err := readFrame(c.r, clientMaxFrame)
	if err != nil {
		return "", nil, err
	}
	if flags&flagCommand == 0 {
		return "", nil, errors.New("expected a command, got a message")
	}
	name, rest := cmdName(body)
	return name, rest, nil
}

// Recv returns the next message's frames (each a fresh buffer the caller
// owns). Commands the server sends between messages are skipped; an ERROR
// command ends the connection.
func (c *Client) Recv() ([][]byte, error) {
	var frames [][]byte
	total := 0
	for {
		flags, body, err := c.readFrame()
		if err != nil {
			return nil, err
		}
		if flags&flagCommand != 0 {
			if name, rest := cmdName(body); name == cmdError {
				return nil, &RefusedError{Reason: errorReason(rest)}
			}
			continue
		}
		frames = append(frames, body)
		total += len(body)
		if flags&flagMore == 0 {
			return frames, nil
		}
		if len(frames) >= clientMaxFrames || total > clientMaxMessage {
			return nil, fmt.Errorf("message of more than %d frames or %d bytes from the server: refusing", clientMaxFrames, clientMaxMessage)
		}
	}
}

// Send sends one message of the given frames (one writev).
func (c *Client) Send(frames ...[]byte) error {
	return c.SendContext(context.Background(), frames...)
}

// SendContext is Send that gives up when ctx is done: while it waits for
// other Sends on the connection, or (by ctx's deadline) while the peer
// takes nothing. A message cut off part way leaves the stream unusable:
// the connection is closed then (Recv fails).
func (c *Client) SendContext(ctx context.Context, frames ...[]byte) error {
	bufs, size := encodeMessage(frames)
	select {
	case c.wsem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.wsem }()
	if c.curve != nil { // (boxed under wsem: nonces in the order sent)
		var err error
		if bufs, size, err = c.curve.sealWire(bufs); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(c.writeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.conn.SetWriteDeadline(deadline)
	n, err := bufs.WriteTo(c.conn)
	if err != nil && n > 0 && n < int64(size) {
		c.conn.Close()
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// Subscribe asks a PUB for messages whose first frame starts with topic
// (ZMTP 3.0 subscription message).
func (c *Client) Subscribe(topic string) error {
	return c.Send(append([]byte{1}, topic...))
}

// Close closes the connection; a Recv in progress returns an error.
func (c *Client) Close() error { return c.conn.Close() }
