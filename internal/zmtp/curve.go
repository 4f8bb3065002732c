package zmtp

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/crypto/nacl/box"
	"golang.org/x/crypto/nacl/secretbox"
)

// The CURVE handshake (ZMTP RFC 26, CurveZMQ), as pure steps over command
// bodies (name included), so that the transport code does the I/O and the
// parsers can be fuzzed alone. Keys: S/s the server's long-term pair,
// S'/s' its transient pair (one per connection), C/c and C'/c' the
// client's. Short nonces are 8-byte big-endian counters, per direction,
// strictly increasing over the handshake and the messages after it.
//
//	C -> S  HELLO    version 1.0, 72 zero bytes (anti-amplification), C',
//	                 nonce, Box[64 zeros](C'->S)              200 bytes
//	S -> C  WELCOME  long nonce, Box[S' + cookie](S->C')      168 bytes
//	                 cookie = nonce(16) + SecretBox[C' + s'](K), K this
//	                 connection's cookie key, forgotten after INITIATE
//	C -> S  INITIATE cookie, nonce, Box[C + vouch + metadata](C'->S')
//	                 vouch = nonce(16) + Box[C' + S](C->S')
//	S -> C  READY    nonce, Box[metadata](S'->C')
//	                 (or ERROR, in clear, refusing the client)

// Command names and nonce prefixes of RFC 26.
const (
	curveHelloName    = "\x05HELLO"
	curveWelcomeName  = "\x07WELCOME"
	curveInitiateName = "\x08INITIATE"
	curveReadyName    = "\x05READY"
	curveHelloLen     = 200
	curveWelcomeLen   = 168
	curveInitiateMin  = 257
)

// Reasons of the ZMTP ERROR commands a CURVE server refuses a client with.
const (
	// CurveHelloRefused: the client's HELLO box does not open with our
	// secret key: it has another server's public key.
	CurveHelloRefused = "CURVE HELLO does not open: wrong server public key"
	// CurveClientRefused: the client's long-term public key is not in the
	// server's allow-list.
	CurveClientRefused = "CURVE client key not allowed"
)

// ErrCurveServerKey says a CURVE server did not prove it holds the secret
// key of the public key the client pinned (or refused ours as not its own).
var ErrCurveServerKey = errors.New("the server does not hold the secret key of the pinned server public key")

func randomBytes(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("zmtp: crypto/rand failed: %v", err)) // (never, per crypto/rand)
	}
}

// curveServerHandshake is the server side of one connection's handshake.
type curveServerHandshake struct {
	long      CurveKeyPair
	tPub      [32]byte // S'
	tSec      [32]byte // s'
	clientT   [32]byte // C'
	cookieKey [32]byte
	peerNonce uint64
}

func newCurveServerHandshake(long CurveKeyPair) (*curveServerHandshake, error) {
	pub, sec, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("curve: transient key: %w", err)
	}
	return &curveServerHandshake{long: long, tPub: *pub, tSec: *sec}, nil
}

// hello checks the client's HELLO and returns our WELCOME.
func (h *curveServerHandshake) hello(body []byte) ([]byte, error) {
	if err := h.checkHello(body); err != nil {
		return nil, err
	}
	return h.welcome(), nil
}

// checkHello checks the client's HELLO: its box must open with our secret key.
func (h *curveServerHandshake) checkHello(body []byte) error {
	if len(body) != curveHelloLen || string(body[:6]) != curveHelloName {
		return &violation{"curve-protocol", fmt.Errorf("HELLO of %d bytes, want %d", len(body), curveHelloLen)}
	}
	if body[6] != 1 || body[7] != 0 {
		return &violation{"curve-protocol", fmt.Errorf("CURVE version %d.%d, want 1.0", body[6], body[7])}
	}
	copy(h.clientT[:], body[80:112])
	short := binary.BigEndian.Uint64(body[112:120])
	sig, ok := box.Open(nil, body[120:200], curveNonce("CurveZMQHELLO---", short), &h.clientT, (*[32]byte)(&h.long.Secret))
	if !ok || !allZero(sig) {
		return &violation{"curve-hello", errors.New("HELLO box does not open: the client has another server public key")}
	}
	h.peerNonce = short
	return nil
}

// welcome returns our WELCOME, with a new cookie key.
func (h *curveServerHandshake) welcome() []byte {
	randomBytes(h.cookieKey[:])
	var cookieNonce [24]byte
	copy(cookieNonce[:], "COOKIE--")
	randomBytes(cookieNonce[8:])
	cookie := secretbox.Seal(nil, append(h.clientT[:], h.tSec[:]...), &cookieNonce, &h.cookieKey)
	pt := make([]byte, 0, 128)
	pt = append(append(append(pt, h.tPub[:]...), cookieNonce[8:]...), cookie...)
	var nonce [24]byte
	copy(nonce[:], "WELCOME-")
	randomBytes(nonce[8:])
	out := append([]byte(curveWelcomeName), nonce[8:]...)
	return box.Seal(out, pt, &nonce, &h.clientT, (*[32]byte)(&h.long.Secret))
}

// initiate checks the client's INITIATE (cookie, vouch) and returns its
// long-term public key and metadata. The cookie key is forgotten, whatever
// the outcome.
func (h *curveServerHandshake) initiate(body []byte) (CurveKey, []byte, error) {
	var client CurveKey
	defer clear(h.cookieKey[:])
	if len(body) < curveInitiateMin || string(body[:9]) != curveInitiateName {
		return client, nil, &violation{"curve-protocol", fmt.Errorf("INITIATE of %d bytes (at least %d)", len(body), curveInitiateMin)}
	}
	var cookieNonce [24]byte
	copy(cookieNonce[:], "COOKIE--")
	copy(cookieNonce[8:], body[9:25])
	cookie, ok := secretbox.Open(nil, body[25:105], &cookieNonce, &h.cookieKey)
	if !ok || subtle.ConstantTimeCompare(cookie, append(h.clientT[:], h.tSec[:]...)) != 1 {
		return client, nil, &violation{"curve-initiate", errors.New("INITIATE cookie is not ours")}
	}
	short := binary.BigEndian.Uint64(body[105:113])
	if short <= h.peerNonce {
		return client, nil, &violation{"curve-replay", fmt.Errorf("INITIATE nonce %d is not above HELLO's %d", short, h.peerNonce)}
	}
	pt, ok := box.Open(nil, body[113:], curveNonce("CurveZMQINITIATE", short), &h.clientT, &h.tSec)
	if !ok {
		return client, nil, &violation{"curve-initiate", errors.New("INITIATE box does not open")}
	}
	copy(client[:], pt[:32])
	var vouchNonce [24]byte
	copy(vouchNonce[:], "VOUCH---")
	copy(vouchNonce[8:], pt[32:48])
	vouch, ok := box.Open(nil, pt[48:128], &vouchNonce, (*[32]byte)(&client), &h.tSec)
	if !ok || !bytes.Equal(vouch[:32], h.clientT[:]) || !bytes.Equal(vouch[32:], h.long.Public[:]) {
		return client, nil, &violation{"curve-initiate", errors.New("INITIATE vouch does not open or names other keys")}
	}
	h.peerNonce = short
	return client, pt[128:], nil
}

// ready returns our READY (with meta) and the codec of the messages after it.
func (h *curveServerHandshake) ready(meta []byte) ([]byte, *curveCodec) {
	c := newCurveCodec(&h.clientT, &h.tSec, true, 1, h.peerNonce)
	out := append([]byte(curveReadyName), 0, 0, 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint64(out[6:], c.sendNonce)
	out = box.SealAfterPrecomputation(out, meta, curveNonce("CurveZMQREADY---", c.sendNonce), &c.shared)
	c.sendNonce++
	clear(h.tSec[:]) // (the codec has the shared key)
	return out, c
}

// curveClientHandshake is the client side of one connection's handshake.
type curveClientHandshake struct {
	server  CurveKey // S, pinned
	long    CurveKeyPair
	tPub    [32]byte // C'
	tSec    [32]byte // c'
	serverT [32]byte // S'
	cookie  []byte
	nonce   uint64 // the next short nonce to send
}

func newCurveClientHandshake(server CurveKey, long CurveKeyPair) (*curveClientHandshake, error) {
	pub, sec, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("curve: transient key: %w", err)
	}
	return &curveClientHandshake{server: server, long: long, tPub: *pub, tSec: *sec, nonce: 1}, nil
}

func (h *curveClientHandshake) next() uint64 {
	n := h.nonce
	h.nonce++
	return n
}

// hello returns our HELLO.
func (h *curveClientHandshake) hello() []byte {
	n := h.next()
	out := make([]byte, 0, curveHelloLen)
	out = append(out, curveHelloName...)
	out = append(out, 1, 0)
	out = append(out, make([]byte, 72)...)
	out = append(out, h.tPub[:]...)
	out = binary.BigEndian.AppendUint64(out, n)
	return box.Seal(out, make([]byte, 64), curveNonce("CurveZMQHELLO---", n), (*[32]byte)(&h.server), &h.tSec)
}

// welcome reads the server's WELCOME.
func (h *curveClientHandshake) welcome(body []byte) error {
	if len(body) != curveWelcomeLen || string(body[:8]) != curveWelcomeName {
		return fmt.Errorf("curve: WELCOME of %d bytes, want %d", len(body), curveWelcomeLen)
	}
	var nonce [24]byte
	copy(nonce[:], "WELCOME-")
	copy(nonce[8:], body[8:24])
	pt, ok := box.Open(nil, body[24:], &nonce, (*[32]byte)(&h.server), &h.tSec)
	if !ok {
		return fmt.Errorf("curve: WELCOME does not open: %w", ErrCurveServerKey)
	}
	copy(h.serverT[:], pt[:32])
	h.cookie = pt[32:128]
	return nil
}

// initiate returns our INITIATE with meta.
func (h *curveClientHandshake) initiate(meta []byte) []byte {
	var vnonce [24]byte
	copy(vnonce[:], "VOUCH---")
	randomBytes(vnonce[8:])
	vouch := box.Seal(nil, append(h.tPub[:], h.server[:]...), &vnonce, &h.serverT, (*[32]byte)(&h.long.Secret))
	pt := make([]byte, 0, 128+len(meta))
	pt = append(append(append(append(pt, h.long.Public[:]...), vnonce[8:]...), vouch...), meta...)
	n := h.next()
	out := make([]byte, 0, 113+box.Overhead+len(pt))
	out = append(append(out, curveInitiateName...), h.cookie...)
	out = binary.BigEndian.AppendUint64(out, n)
	return box.Seal(out, pt, curveNonce("CurveZMQINITIATE", n), &h.serverT, &h.tSec)
}

// ready reads the server's READY: its metadata, and the codec of the
// messages after it.
func (h *curveClientHandshake) ready(body []byte) ([]byte, *curveCodec, error) {
	if len(body) < 6+8+box.Overhead || string(body[:6]) != curveReadyName {
		return nil, nil, fmt.Errorf("curve: READY of %d bytes", len(body))
	}
	short := binary.BigEndian.Uint64(body[6:14])
	c := newCurveCodec(&h.serverT, &h.tSec, false, h.nonce, short)
	meta, ok := box.OpenAfterPrecomputation(nil, body[14:], curveNonce("CurveZMQREADY---", short), &c.shared)
	if !ok {
		return nil, nil, errors.New("curve: READY does not open")
	}
	clear(h.tSec[:])
	return meta, c, nil
}

func allZero(b []byte) bool {
	var v byte
	for _, x := range b {
		v |= x
	}
	return v == 0
}
