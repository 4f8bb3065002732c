package zmtp

import (
	"bytes"
	"errors"
	"testing"
)

// curvePair runs a handshake in memory and returns both codecs.
func curvePair(t testing.TB) (client, server *curveCodec, clientKey CurveKeyPair) {
	t.Helper()
	skp, _ := NewCurveKeyPair()
	ckp, _ := NewCurveKeyPair()
	ch, _ := newCurveClientHandshake(skp.Public, ckp)
	sh, _ := newCurveServerHandshake(skp)
	welcome, err := sh.hello(ch.hello())
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.welcome(welcome); err != nil {
		t.Fatal(err)
	}
	key, meta, err := sh.initiate(ch.initiate(metadata("Socket-Type", "DEALER")))
	if err != nil {
		t.Fatal(err)
	}
	if key != ckp.Public {
		t.Fatalf("client key %v, want %v", key, ckp.Public)
	}
	if m, err := parseMetadata(meta); err != nil || m["socket-type"] != "DEALER" {
		t.Fatalf("metadata %q %v", meta, err)
	}
	ready, sc := sh.ready(metadata("Socket-Type", "ROUTER"))
	rmeta, cc, err := ch.ready(ready)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := parseMetadata(rmeta); m["socket-type"] != "ROUTER" {
		t.Fatalf("READY metadata %q", rmeta)
	}
	return cc, sc, ckp
}

// frameBody strips a sealed frame's header.
func frameBody(f []byte) []byte {
	if f[0]&flagLong != 0 {
		return f[9:]
	}
	return f[2:]
}

func TestCurveHandshakeAndMessages(t *testing.T) {
	cc, sc, _ := curvePair(t)
	for i, data := range [][]byte{nil, []byte("hello"), bytes.Repeat([]byte("x"), 70000)} {
		f := cc.sealFrame(flagMore, data)
		flags, got, err := sc.open(frameBody(f))
		if err != nil || flags != flagMore || !bytes.Equal(got, data) {
			t.Fatalf("frame %d: flags %x, %d bytes, %v", i, flags, len(got), err)
		}
	}
	// Server to client, a whole encoded message with a body in parts.
	wire, _ := encodeMessage([][]byte{[]byte("topic"), []byte("body")})
	sealed, size, err := sc.sealWire(wire)
	if err != nil || len(sealed) != 2 || size != len(sealed[0])+len(sealed[1]) {
		t.Fatalf("sealWire: %d buffers, %d bytes, %v", len(sealed), size, err)
	}
	f0, d0, err0 := cc.open(frameBody(sealed[0]))
	f1, d1, err1 := cc.open(frameBody(sealed[1]))
	if err0 != nil || err1 != nil || f0 != flagMore || f1 != 0 || string(d0) != "topic" || string(d1) != "body" {
		t.Fatalf("opened %x %q %v, %x %q %v", f0, d0, err0, f1, d1, err1)
	}
}

func TestCurveRefusesReplayAndBadBoxes(t *testing.T) {
	cc, sc, _ := curvePair(t)
	first := cc.sealFrame(0, []byte("one"))
	second := cc.sealFrame(0, []byte("two"))
	if _, _, err := sc.open(append([]byte(nil), frameBody(second)...)); err != nil {
		t.Fatal(err)
	}
	var v *violation
	// Out of order (an older nonce) and replayed.
	for _, f := range [][]byte{first, second} {
		if _, _, err := sc.open(append([]byte(nil), frameBody(f)...)); !errors.As(err, &v) || v.reason != "curve-replay" {
			t.Fatalf("replay: %v", err)
		}
	}
	bad := cc.sealFrame(0, []byte("three"))
	bad[len(bad)-1] ^= 1
	if _, _, err := sc.open(frameBody(bad)); !errors.As(err, &v) || v.reason != "curve-bad-box" {
		t.Fatalf("bad box: %v", err)
	}
	// The server's own direction's prefix does not open at the server.
	own := sc.sealFrame(0, []byte("mirror"))
	if _, _, err := sc.open(frameBody(own)); err == nil {
		t.Fatal("a server-to-client box opened as client-to-server")
	}
	if _, _, err := sc.open([]byte("\x07MESSAGE")); !errors.As(err, &v) || v.reason != "curve-protocol" {
		t.Fatalf("short: %v", err)
	}
}

func TestCurveWrongServerKey(t *testing.T) {
	skp, _ := NewCurveKeyPair()
	other, _ := NewCurveKeyPair()
	ckp, _ := NewCurveKeyPair()
	ch, _ := newCurveClientHandshake(other.Public, ckp)
	sh, _ := newCurveServerHandshake(skp)
	var v *violation
	if _, err := sh.hello(ch.hello()); !errors.As(err, &v) || v.reason != "curve-hello" {
		t.Fatalf("hello to the wrong server: %v", err)
	}
	// An impostor without the pinned key's secret that answers anyway:
	// its WELCOME does not open at the client.
	ch2, _ := newCurveClientHandshake(skp.Public, ckp)
	hello := ch2.hello()
	imp, _ := newCurveServerHandshake(other)
	copy(imp.clientT[:], hello[80:112])
	if err := ch2.welcome(imp.welcome()); !errors.Is(err, ErrCurveServerKey) {
		t.Fatalf("impostor's WELCOME: %v", err)
	}
}

func TestCurveInitiateChecks(t *testing.T) {
	skp, _ := NewCurveKeyPair()
	ckp, _ := NewCurveKeyPair()
	ch, _ := newCurveClientHandshake(skp.Public, ckp)
	sh, _ := newCurveServerHandshake(skp)
	welcome, _ := sh.hello(ch.hello())
	_ = ch.welcome(welcome)
	init := ch.initiate(nil)
	tampered := append([]byte(nil), init...)
	tampered[30] ^= 1 // (in the cookie)
	if _, _, err := sh.initiate(tampered); err == nil {
		t.Fatal("tampered cookie accepted")
	}
	// The cookie key is forgotten after one INITIATE: the genuine one
	// fails now too.
	if _, _, err := sh.initiate(init); err == nil {
		t.Fatal("cookie accepted after its key was forgotten")
	}
}

func FuzzCurveHandshakeCommands(f *testing.F) {
	skp, _ := NewCurveKeyPair()
	ckp, _ := NewCurveKeyPair()
	ch, _ := newCurveClientHandshake(skp.Public, ckp)
	hello := ch.hello()
	sh, _ := newCurveServerHandshake(skp)
	welcome, _ := sh.hello(hello)
	_ = ch.welcome(welcome)
	f.Add(hello, ch.initiate(metadata("Socket-Type", "SUB")), welcome)
	f.Add([]byte(curveHelloName), []byte(curveInitiateName), []byte(curveWelcomeName))
	f.Fuzz(func(t *testing.T, hello, initiate, welcome []byte) {
		sh, _ := newCurveServerHandshake(skp)
		if _, err := sh.hello(hello); err == nil {
			if _, meta, err := sh.initiate(initiate); err == nil {
				_, _ = parseMetadata(meta)
			}
		}
		ch, _ := newCurveClientHandshake(skp.Public, ckp)
		_ = ch.welcome(welcome)
		_, _, _ = ch.ready(welcome)
		cc := newCurveCodec(&sh.clientT, &sh.tSec, true, 1, 0)
		_, _, _ = cc.open(initiate)
		_, _ = parseMetadata(initiate)
	})
}
