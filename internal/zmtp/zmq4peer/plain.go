package zmq4peer

import (
	"errors"
	"fmt"
	"io"

	"github.com/go-zeromq/zmq4"
)

// plainSecurity is the client side of ZMTP PLAIN (RFC 24) for zmq4 sockets:
// it sends the supervisor's token as the password. It is stateless (zmq4's
// own PLAIN forgets its credentials after one handshake), so one value
// serves any number of connections.
type plainSecurity struct {
	user, token string
}

// PlainClient returns the client side of PLAIN with the given token.
func PlainClient(token string) zmq4.Security {
	return plainSecurity{user: "exec-supervisor", token: token}
}

func (plainSecurity) Type() zmq4.SecurityType { return zmq4.PlainSecurity }

// Handshake runs the client side; the server side is the supervisor's
// hardened listener (internal/zmtp), which checks the password before
// anything else happens.
func (s plainSecurity) Handshake(conn *zmq4.Conn, server bool) error {
	if server {
		return errors.New("plain: this mechanism is client-side only")
	}
	return s.clientHandshake(conn)
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

// errorReason is the reason of an ERROR command's body: [len][reason].
func errorReason(b []byte) string {
	if len(b) < 1 || int(b[0]) > len(b)-1 {
		return "no reason given"
	}
	return string(b[1 : 1+int(b[0])])
}
