package zmtp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// CurveServer is the CURVE side of a listener (Policy.Curve): the server's
// long-term key pair and the clients it admits.
type CurveServer struct {
	Key CurveKeyPair
	// Clients lists the client public keys admitted (besides Key's own);
	// nil admits none.
	Clients *CurveAllowList
}

// curveAccept runs a CURVE peer's handshake from its HELLO (body) through
// WELCOME to its INITIATE, under the pre-handshake's deadline and
// progress accounting: the client must hold the secret key of an allowed
// public key, and vouch for its transient key, before it takes a
// connection slot. It returns the handshake (the engine's side sends
// READY), or the reason to refuse the peer; a peer with another server
// key (HELLO does not open) or a key not allowed gets a ZMTP ERROR first.
func (l *hardenedListener) curveAccept(raw net.Conn, remote string, hello []byte) (*curveServerHandshake, string, error) {
	cs := l.policy.Curve
	h, err := newCurveServerHandshake(cs.Key)
	if err != nil {
		return nil, "handshake", err
	}
	welcome, err := h.hello(hello)
	if err != nil {
		var v *violation
		if errors.As(err, &v) && v.reason == "curve-hello" {
			l.sendErrorCmd(raw, CurveHelloRefused)
		}
		return nil, violationReason(err), err
	}
	if err := writeRawCommand(raw, welcome); err != nil {
		return nil, "handshake-write", err
	}
	_, body, reason, err := l.readHandshakeCommand(raw)
	if err != nil {
		return nil, reason, err
	}
	client, meta, err := h.initiate(body)
	if err != nil {
		return nil, violationReason(err), err
	}
	// The server's own key is admitted too (its self-checks): whoever
	// holds its secret could be the server anyway.
	name, ok := "(the server's own key)", client == cs.Key.Public
	if !ok && cs.Clients != nil {
		var reloaded bool
		var lerr error
		name, ok, reloaded, lerr = cs.Clients.Lookup(client)
		if reloaded && l.policy.Log != nil {
			if lerr != nil {
				l.policy.Log("CURVE allow-list not usable: keeping the keys last read", "file", cs.Clients.Path(), "err", lerr)
			} else {
				l.policy.Log("CURVE allow-list read", "file", cs.Clients.Path(), "keys", cs.Clients.Len())
			}
		}
	}
	if !ok {
		l.sendErrorCmd(raw, CurveClientRefused)
		return nil, "curve-unknown-client", fmt.Errorf("client key %v is not in the allow-list", client)
	}
	if err := checkPeerMetadata(meta, l.policy.peerTypes); err != nil {
		return nil, violationReason(err), err
	}
	if l.policy.Debug != nil {
		l.policy.Debug("CURVE client admitted", "remote", remote, "key", client.String(), "name", name)
	}
	return h, "", nil
}

// curveReady sends a CURVE peer our READY (announcing sockType) and
// switches the connection to boxed frames.
func (c *hardenedConn) curveReady(sockType string) error {
	ready, codec := c.curveHS.ready(metadata("Socket-Type", sockType))
	c.curveHS = nil
	c.curve = codec
	_ = c.Conn.SetReadDeadline(time.Time{})
	_, err := c.Write(encodeFrame(flagCommand, ready))
	return err
}

// readMsgFrame reads the peer's next frame from r (the connection, maybe
// buffered), unboxed on a CURVE connection, where a frame that is not a
// MESSAGE, repeats or goes back in nonces, or does not open is counted
// and ends the connection.
func (c *hardenedConn) readMsgFrame(r io.Reader) (byte, []byte, error) {
	if c.curve == nil {
		return readFrame(r, c.parser.max)
	}
	flags, body, err := c.curve.readBox(r, c.parser.max)
	if err != nil {
		return flags, body, err
	}
	flags, body, err = c.curve.open(body)
	if err != nil {
		c.l.policy.reject(violationReason(err), c.peer(), err)
		c.rejected = true
		c.Close()
	}
	return flags, body, err
}

// violationReason is the reason a violation is counted under.
func violationReason(err error) string {
	var v *violation
	if errors.As(err, &v) {
		return v.reason
	}
	return "protocol-violation"
}

// writeRawCommand writes a command whose body (name included) is ready.
func writeRawCommand(w io.Writer, body []byte) error {
	_, err := w.Write(encodeFrame(flagCommand, body))
	return err
}
