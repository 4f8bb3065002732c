package zmtp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
)

// curveHandshake runs the client side of the ZMTP greeting and the CURVE
// handshake (see curve.go), announcing socketType. A server that refuses
// our HELLO (CurveHelloRefused), closes the connection instead of
// answering it (libzmq does), or sends a WELCOME that does not open is
// not the server whose key we pinned: ErrCurveServerKey.
func (c *Client) curveHandshake(socketType string, cc *CurveClient) error {
	h, err := newCurveClientHandshake(cc.Server, cc.Key)
	if err != nil {
		return err
	}
	pm, err := c.exchangeGreeting(mechCurve)
	if err != nil {
		return err
	}
	if pm != string(mechCurve) {
		return &MechanismError{Server: pm, Client: string(mechCurve)}
	}
	if err := writeRawCommand(c.conn, h.hello()); err != nil {
		return fmt.Errorf("curve: send HELLO: %w", err)
	}
	body, err := c.handshakeCommand(cmdWelcome)
	var re *RefusedError
	switch {
	case errors.As(err, &re) && re.Reason == CurveHelloRefused:
		return fmt.Errorf("curve: %w (%w)", ErrCurveServerKey, err)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed):
		return fmt.Errorf("curve: the server closed the connection at our HELLO: %w? (%w)", ErrCurveServerKey, err)
	case err != nil:
		return fmt.Errorf("curve: %w", err)
	}
	if err := h.welcome(body); err != nil {
		return err
	}
	if err := writeRawCommand(c.conn, h.initiate(metadata("Socket-Type", socketType))); err != nil {
		return fmt.Errorf("curve: send INITIATE: %w", err)
	}
	if body, err = c.handshakeCommand(cmdReady); err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	meta, codec, err := h.ready(body)
	if err != nil {
		return err
	}
	if _, err := parseMetadata(meta); err != nil {
		return fmt.Errorf("curve: READY metadata: %w", err)
	}
	c.curve = codec
	return nil
}

// handshakeCommand reads one handshake command, whole (name included):
// want, or an ERROR (a *RefusedError).
func (c *Client) handshakeCommand(want string) ([]byte, error) {
	flags, body, err := readFrame(c.r, maxHandshakeCmd)
	if err != nil {
		return nil, fmt.Errorf("waiting for %s: %w", want, err)
	}
	name, rest := cmdName(body)
	switch {
	case flags&flagCommand == 0:
		return nil, fmt.Errorf("waiting for %s: got a message", want)
	case name == cmdError:
		return nil, &RefusedError{Reason: errorReason(rest)}
	case name != want:
		return nil, fmt.Errorf("expected %s, got %.16q", want, name)
	}
	return body, nil
}

// readFrame reads the server's next frame, unboxed on a CURVE connection.
// There an ERROR command may come in clear: the server refusing us, or
// giving us up, once the connection is idle (only its end can be forged
// that way, which an attacker on the path can always bring about).
func (c *Client) readFrame() (byte, []byte, error) {
	if c.curve == nil {
		return readFrame(c.r, clientMaxFrame)
	}
	flags, body, err := c.curve.readBox(c.r, clientMaxFrame)
	if err != nil {
		return flags, body, err
	}
	if name, _ := cmdName(body); name == cmdError {
		return flags | flagCommand, bytes.Clone(body), nil
	}
	flags, body, err = c.curve.open(body)
	if err != nil {
		c.conn.Close()
		return 0, nil, fmt.Errorf("curve: %w", err)
	}
	return flags, body, nil
}
