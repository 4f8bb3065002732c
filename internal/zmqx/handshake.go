package zmqx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

const (
	greetingLen  = 64
	signatureLen = 10
	flagMore     = 0x01
	flagLong     = 0x02
	flagCommand  = 0x04
)

// preHandshake reads the peer's greeting and first command under the
// handshake deadline, answering the signature itself (libzmq peers wait for
// it before sending the rest). PLAIN credentials are checked here, so only
// authenticated peers reach the engine.
//
// own says whether the peer runs as our uid (see admit); plain whether
// it must authenticate with PLAIN (else NULL: see LoopbackUIDs);
// adaptive, for a peer LoopbackUIDs admits, that its own mechanism
// decides: NULL, or PLAIN with the token (a libzmq client configured with
// it fails on a server greeting of another mechanism). Our greeting then
// goes in two parts: signature and major version, upon which libzmq
// peers send the rest of theirs (zmq4 peers send theirs whole at once),
// then, once the peer's mechanism is read, the rest with the same one.
// A peer that sends no mechanism within greetingPeek (one that waits for
// ours first) is offered NULL.
func (l *hardenedListener) preHandshake(raw net.Conn, remote, key string, own func() bool, plain, adaptive bool) {
	fail := func(reason string, err error) {
		l.pmu.Lock()
		if l.displaced[raw] { // (closed for a newer one: whatever failed)
			reason = "handshake-displaced"
		}
		l.pmu.Unlock()
		// (counted before the peer can see the connection closed)
		l.policy.reject(reason, remote, err)
		raw.Close()
	}
	_ = raw.SetReadDeadline(time.Now().Add(l.policy.HandshakeTimeout))
	_ = raw.SetWriteDeadline(time.Now().Add(l.policy.HandshakeTimeout))
	buf := make([]byte, greetingLen, greetingLen+64)
	if _, err := io.ReadFull(raw, buf[:signatureLen]); err != nil {
		fail("handshake-timeout-or-eof", err)
		return
	}
	l.progressed(raw)
	if buf[0] != 0xFF || buf[9]&0x01 != 0x01 {
		fail("bad-signature", nil)
		return
	}
	// Answer with our whole greeting at once: libzmq sends its version
	// byte only after our signature and the rest only after our version;
	// zmq4 peers wait for all 64 bytes. The engine's own greeting is
	// swallowed (see hardenedConn.Write).
	got := signatureLen
	if adaptive {
		if _, err := raw.Write(greeting(false)[:signatureLen+1]); err != nil {
			fail("handshake-write", err)
			return
		}
		_ = raw.SetReadDeadline(time.Now().Add(min(greetingPeek, l.policy.HandshakeTimeout)))
		n, err := io.ReadFull(raw, buf[signatureLen:32])
		got += n
		var ne net.Error
		switch {
		case err == nil:
			plain = strings.TrimRight(string(buf[12:32]), "\x00") == string(zmq4.PlainSecurity)
		case errors.As(err, &ne) && ne.Timeout():
			plain = false // (a peer waiting for our mechanism)
		default:
			fail("handshake-timeout-or-eof", err)
			return
		}
		_ = raw.SetReadDeadline(time.Now().Add(l.policy.HandshakeTimeout))
		if _, err := raw.Write(greeting(plain)[signatureLen+1:]); err != nil {
			fail("handshake-write", err)
			return
		}
	} else if _, err := raw.Write(greeting(plain)); err != nil {
		fail("handshake-write", err)
		return
	}
	if _, err := io.ReadFull(raw, buf[got:]); err != nil {
		fail("handshake-timeout-or-eof", err)
		return
	}
	l.progressed(raw)
	if buf[10] < 3 {
		fail("old-zmtp-version", fmt.Errorf("ZMTP %d.%d", buf[10], buf[11]))
		return
	}
	mech := strings.TrimRight(string(buf[12:32]), "\x00")
	if mech != mechanism(plain) {
		l.sendErrorCmd(raw, "security mechanism "+mechanism(plain)+" required")
		fail("wrong-mechanism", fmt.Errorf("peer offered %q", mech))
		return
	}
	// The first command: READY (NULL) or HELLO (PLAIN).
	var hdr [9]byte
	if _, err := io.ReadFull(raw, hdr[:2]); err != nil {
		fail("handshake-timeout-or-eof", err)
		return
	}
	l.progressed(raw)
	if hdr[0]&flagCommand == 0 {
		fail("protocol-violation", errors.New("first frame is not a command"))
		return
	}
	hlen := 2
	size := uint64(hdr[1])
	if hdr[0]&flagLong != 0 {
		if _, err := io.ReadFull(raw, hdr[2:9]); err != nil {
			fail("handshake-timeout-or-eof", err)
			return
		}
		hlen = 9
		size = binary.BigEndian.Uint64(hdr[1:9])
	}
	if size > 4096 {
		fail("frame-too-large", fmt.Errorf("handshake command of %d bytes", size))
		return
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(raw, body); err != nil {
		fail("handshake-timeout-or-eof", err)
		return
	}
	name, rest := cmdName(body)
	if plain {
		if name != zmq4.CmdHello || !plainBodyOK(rest, l.policy.Token) {
			l.sendErrorCmd(raw, AuthFailed)
			fail("auth-failed", nil)
			return
		}
	} else if name != zmq4.CmdReady {
		fail("protocol-violation", fmt.Errorf("expected READY, got %q", name))
		return
	}
	if !l.admit(key, own) {
		msg := fmt.Sprintf("%s: the limit of %d is reached and no connection could be given up", TooManyConnections, l.policy.MaxConns)
		l.sendErrorCmd(raw, msg)
		fail("too-many-connections", errors.New(msg))
		return
	}
	// Admitted: no longer in the handshake, so never displaced (it
	// holds a slot, maybe one an idle peer was given up for).
	l.pmu.Lock()
	delete(l.pending, raw)
	l.pmu.Unlock()
	pre := append(append(buf, hdr[:hlen]...), body...)
	if l.policy.Debug != nil {
		l.policy.Debug("connection accepted", "remote", remote, "mechanism", mech)
	}
	c := &hardenedConn{Conn: raw, l: l, replay: pre, peerKey: key, plain: plain}
	if sc, ok := raw.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	c.parser = frameParser{max: l.policy.MaxFrameBytes, finalCmd: zmq4.CmdReady, peerTypes: l.policy.peerTypes}
	if plain {
		c.parser.finalCmd = zmq4.CmdInitiate
	}
	select {
	case l.ready <- c:
	case <-l.done:
		c.Close()
	}
}

// greetingPeek bounds how long a peer admitted by LoopbackUIDs may take
// to send its mechanism before ours is chosen for it (see preHandshake):
// libzmq and zmq4 peers send it as soon as they have our version.
const greetingPeek = 250 * time.Millisecond

// greeting is our greeting: signature, ZMTP 3.0, our mechanism (PLAIN if
// plain, else NULL), as-server (1 with PLAIN, whose server we are: RFC 23
// and 24; 0 with NULL, which has no server role), zero filler.
func greeting(plain bool) []byte {
	g := make([]byte, greetingLen)
	g[0], g[9] = 0xFF, 0x7F
	g[10], g[11] = 3, 0
	copy(g[12:32], mechanism(plain))
	if plain {
		g[32] = 1
	}
	return g
}

// sendErrorCmd sends a ZMTP ERROR command (after our greeting), so that a
// refused libzmq peer learns why.
func (l *hardenedListener) sendErrorCmd(raw net.Conn, reason string) {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	body := append([]byte{byte(len(zmq4.CmdError))}, zmq4.CmdError...)
	body = append(append(body, byte(len(reason))), reason...)
	_, _ = raw.Write(append([]byte{flagCommand, byte(len(body))}, body...))
}

func cmdName(body []byte) (string, []byte) {
	if len(body) == 0 || int(body[0]) > len(body)-1 {
		return "", nil
	}
	n := int(body[0])
	return string(body[1 : 1+n]), body[1+n:]
}
