package zmqx

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"

	"github.com/go-zeromq/zmq4"
)

// plainSecurity is a ZMTP PLAIN mechanism (RFC 24) of our own: the server
// side checks the password against the supervisor's token (the user name
// is ignored); the client side sends it. It is stateless, so one value can
// serve any number of connections.
type plainSecurity struct {
	user, token string
}

// PlainClient returns the client side of PLAIN with the given token.
func PlainClient(token string) zmq4.Security {
	return plainSecurity{user: "exec-supervisor", token: token}
}

func plainServer(token string) zmq4.Security { return plainSecurity{token: token} }

func (plainSecurity) Type() zmq4.SecurityType { return zmq4.PlainSecurity }

func (s plainSecurity) Handshake(conn *zmq4.Conn, server bool) error {
	if server {
		return s.serverHandshake(conn)
	}
	return s.clientHandshake(conn)
}

func (s plainSecurity) serverHandshake(conn *zmq4.Conn) error {
	cmd, err := conn.RecvCmd()
	if err != nil {
		return fmt.Errorf("plain: receive HELLO: %w", err)
	}
	// The hardened listener already checked the password; check again so
	// this mechanism is safe on its own.
	if cmd.Name != zmq4.CmdHello || !plainBodyOK(cmd.Body, s.token) {
		_ = conn.SendCmd(zmq4.CmdError, reason("authentication failed"))
		return errors.New("plain: authentication failed")
	}
	if err := conn.SendCmd(zmq4.CmdWelcome, nil); err != nil {
		return fmt.Errorf("plain: send WELCOME: %w", err)
	}
	cmd, err = conn.RecvCmd()
	if err != nil {
		return fmt.Errorf("plain: receive INITIATE: %w", err)
	}
	if cmd.Name != zmq4.CmdInitiate {
		return fmt.Errorf("plain: expected INITIATE, got %q", cmd.Name)
	}
	if err := conn.Peer.Meta.UnmarshalZMTP(cmd.Body); err != nil {
		return fmt.Errorf("plain: peer metadata: %w", err)
	}
	raw, err := conn.Meta.MarshalZMTP()
	if err != nil {
		return fmt.Errorf("plain: metadata: %w", err)
	}
	if err := conn.SendCmd(zmq4.CmdReady, raw); err != nil {
		return fmt.Errorf("plain: send READY: %w", err)
	}
	return nil
}

func (s plainSecurity) clientHandshake(conn *zmq4.Conn) error {
	if len(s.user) > 255 || len(s.token) > 255 {
		return errors.New("plain: user name and token must be at most 255 bytes")
	}
	hello := append([]byte{byte(len(s.user))}, s.user...)
	hello = append(append(hello, byte(len(s.token))), s.token...)
	if err := conn.SendCmd(zmq4.CmdHello, hello); err != nil {
		return fmt.Errorf("plain: send HELLO: %w", err)
	}
	cmd, err := conn.RecvCmd()
	if err != nil {
		return fmt.Errorf("plain: receive WELCOME: %w", err)
	}
	if cmd.Name == zmq4.CmdError {
		return fmt.Errorf("plain: server refused: %s", errorReason(cmd.Body))
	}
	if cmd.Name != zmq4.CmdWelcome {
		return fmt.Errorf("plain: expected WELCOME, got %q", cmd.Name)
	}
	raw, err := conn.Meta.MarshalZMTP()
	if err != nil {
		return fmt.Errorf("plain: metadata: %w", err)
	}
	if err := conn.SendCmd(zmq4.CmdInitiate, raw); err != nil {
		return fmt.Errorf("plain: send INITIATE: %w", err)
	}
	cmd, err = conn.RecvCmd()
	if err != nil {
		return fmt.Errorf("plain: receive READY: %w", err)
	}
	if cmd.Name != zmq4.CmdReady {
		return fmt.Errorf("plain: expected READY, got %q", cmd.Name)
	}
	return conn.Peer.Meta.UnmarshalZMTP(cmd.Body)
}

func (plainSecurity) Encrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }
func (plainSecurity) Decrypt(w io.Writer, data []byte) (int, error) { return w.Write(data) }

// plainBodyOK checks a HELLO body: [user len][user][pass len][pass].
func plainBodyOK(b []byte, token string) bool {
	if len(b) < 1 || int(b[0]) > len(b)-1 {
		return false
	}
	b = b[1+int(b[0]):]
	if len(b) < 1 || int(b[0]) != len(b)-1 {
		return false
	}
	return subtle.ConstantTimeCompare(b[1:], []byte(token)) == 1
}

func reason(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func errorReason(b []byte) string {
	if len(b) < 1 || int(b[0]) > len(b)-1 {
		return "no reason given"
	}
	return string(b[1 : 1+int(b[0])])
}
