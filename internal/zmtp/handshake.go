package zmtp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
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
// own says whether the peer runs as our uid (see admit); m the mechanism
// it must use (CURVE, PLAIN or NULL: see LoopbackUIDs); adaptive, for a
// peer LoopbackUIDs admits, that its own mechanism decides: NULL, PLAIN
// with the token, or CURVE with an allowed key (a libzmq client configured
// with one fails on a server greeting of another mechanism). With CURVE
// the whole handshake up to the client's INITIATE runs here (see
// curveAccept), so that only allowed clients take a connection slot. Our greeting then
// goes in two parts: signature and major version, upon which libzmq
// peers send the rest of theirs (zmq4 peers send theirs whole at once),
// then, once the peer's mechanism is read, the rest with the same one.
// A peer that sends no mechanism within greetingPeek (one that waits for
// ours first) is offered NULL.
func (l *hardenedListener) preHandshake(raw net.Conn, remote, key string, own func() bool, m mech, adaptive bool) {
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
		if _, err := raw.Write(greeting(mechNull)[:signatureLen+1]); err != nil {
			fail("handshake-write", err)
			return
		}
		_ = raw.SetReadDeadline(time.Now().Add(min(greetingPeek, l.policy.HandshakeTimeout)))
		n, err := io.ReadFull(raw, buf[signatureLen:32])
		got += n
		var ne net.Error
		switch {
		case err == nil:
			switch mech(strings.TrimRight(string(buf[12:32]), "\x00")) {
			case mechPlain:
				if l.policy.Token != "" {
					m = mechPlain
				}
			case mechCurve:
				if l.policy.Curve != nil {
					m = mechCurve
				}
			}
		case errors.As(err, &ne) && ne.Timeout():
			m = mechNull // (a peer waiting for our mechanism)
		default:
			fail("handshake-timeout-or-eof", err)
			return
		}
		_ = raw.SetReadDeadline(time.Now().Add(l.policy.HandshakeTimeout))
		if _, err := raw.Write(greeting(m)[signatureLen+1:]); err != nil {
			fail("handshake-write", err)
			return
		}
	} else if _, err := raw.Write(greeting(m)); err != nil {
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
	peerMech := strings.TrimRight(string(buf[12:32]), "\x00")
	if peerMech != string(m) {
		l.sendErrorCmd(raw, "security mechanism "+string(m)+" required")
		fail("wrong-mechanism", fmt.Errorf("peer offered %q", peerMech))
		return
	}
	// The first command: READY (NULL) or HELLO (PLAIN, CURVE).
	hdr, body, reason, err := l.readHandshakeCommand(raw)
	if err != nil {
		fail(reason, err)
		return
	}
	name, rest := cmdName(body)
	var curve *curveServerHandshake
	switch {
	case m == mechCurve:
		if curve, reason, err = l.curveAccept(raw, remote, body); err != nil {
			fail(reason, err)
			return
		}
	case m == mechPlain:
		if name != cmdHello || !plainBodyOK(rest, l.policy.Token) {
			l.sendErrorCmd(raw, AuthFailed)
			fail("auth-failed", nil)
			return
		}
	case name != cmdReady:
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
	if l.policy.Debug != nil {
		l.policy.Debug("connection accepted", "remote", remote, "mechanism", peerMech)
	}
	c := &hardenedConn{Conn: raw, l: l, peerKey: key, mech: m, curveHS: curve}
	if sc, ok := raw.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	c.parser = frameParser{max: l.policy.MaxFrameBytes, finalCmd: cmdReady, peerTypes: l.policy.peerTypes}
	switch m {
	case mechPlain:
		c.parser.finalCmd = cmdInitiate
	case mechCurve:
		// Done with: the engine's side only sends READY (and the peer's
		// socket type was checked in INITIATE's box). What follows are
		// MESSAGE frames, size-checked as any.
		c.parser.pos, c.parser.handshakeDone = greetingLen, true
	}
	if m != mechCurve {
		c.replay = append(append(buf, hdr...), body...)
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

// greeting is our greeting: signature, ZMTP 3.0, mechanism m, as-server
// (1 with PLAIN and CURVE, whose server we are: RFC 23, 24 and 26; 0 with
// NULL, which has no server role), zero filler.
func greeting(m mech) []byte {
	g := make([]byte, greetingLen)
	g[0], g[9] = 0xFF, 0x7F
	g[10], g[11] = 3, 0
	copy(g[12:32], m)
	if m != mechNull {
		g[32] = 1
	}
	return g
}

// readHandshakeCommand reads one command of the peer's handshake (at most
// maxHandshakeCmd bytes): its frame header and body, or the reason to
// refuse the peer.
func (l *hardenedListener) readHandshakeCommand(raw net.Conn) (hdr, body []byte, reason string, err error) {
	var h [9]byte
	if _, err := io.ReadFull(raw, h[:2]); err != nil {
		return nil, nil, "handshake-timeout-or-eof", err
	}
	l.progressed(raw)
	if h[0]&flagCommand == 0 {
		return nil, nil, "protocol-violation", errors.New("a handshake frame is not a command")
	}
	hlen := 2
	size := uint64(h[1])
	if h[0]&flagLong != 0 {
		if _, err := io.ReadFull(raw, h[2:9]); err != nil {
			return nil, nil, "handshake-timeout-or-eof", err
		}
		hlen = 9
		size = binary.BigEndian.Uint64(h[1:9])
	}
	if size > maxHandshakeCmd {
		return nil, nil, "frame-too-large", fmt.Errorf("handshake command of %d bytes", size)
	}
	body = make([]byte, size)
	if _, err := io.ReadFull(raw, body); err != nil {
		return nil, nil, "handshake-timeout-or-eof", err
	}
	l.progressed(raw)
	return h[:hlen], body, "", nil
}

// sendErrorCmd sends a ZMTP ERROR command (after our greeting), so that a
// refused libzmq peer learns why.
func (l *hardenedListener) sendErrorCmd(raw net.Conn, reason string) {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	body := append([]byte{byte(len(cmdError))}, cmdError...)
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
