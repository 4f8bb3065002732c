package zmtp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/crypto/nacl/box"
)

// curveCodec boxes and unboxes the MESSAGE commands of an established
// CURVE connection (RFC 26): every frame travels as
// [flags][size] "\x07MESSAGE" nonce(8) Box[frame flags + data](transient
// keys), under the nonce prefix "CurveZMQMESSAGEC" from the client and
// "CurveZMQMESSAGES" from the server, with a short nonce that goes up by
// one per frame sent (after the handshake's own). A frame whose nonce is
// not above the last one received, or whose box does not open, ends the
// connection: replays and reordering are refused.
//
// seal and sealWire must be called in the order the frames go out on the
// wire, one at a time (by whoever holds the right to write: the outQueue's
// writing flag, the Client's send semaphore); readBox and open from the
// connection's one reader.
type curveCodec struct {
	shared     [32]byte
	sendPrefix string
	recvPrefix string
	sendNonce  uint64 // the next to send
	recvNonce  uint64 // the last received
	scratch    []byte // a frame's plaintext being sealed
	rbuf       []byte // the last boxed frame read (see readBox)
}

const (
	curveMsgName = "\x07MESSAGE"
	// curveMsgOverhead is what boxing adds to a frame's body.
	curveMsgOverhead = len(curveMsgName) + 8 + box.Overhead + 1
	// curveMsgMore and curveMsgCommand are the flags inside the box.
	curveMsgMore    = 0x01
	curveMsgCommand = 0x02
)

func newCurveCodec(peerPub, ourSec *[32]byte, server bool, sendNonce, recvNonce uint64) *curveCodec {
	c := &curveCodec{sendNonce: sendNonce, recvNonce: recvNonce,
		sendPrefix: "CurveZMQMESSAGEC", recvPrefix: "CurveZMQMESSAGES"}
	if server {
		c.sendPrefix, c.recvPrefix = c.recvPrefix, c.sendPrefix
	}
	box.Precompute(&c.shared, peerPub, ourSec)
	return c
}

// curveNonce is a 24-byte nonce: a 16-byte prefix and a big-endian short
// nonce.
func curveNonce(prefix string, n uint64) *[24]byte {
	var nonce [24]byte
	copy(nonce[:16], prefix)
	binary.BigEndian.PutUint64(nonce[16:], n)
	return &nonce
}

// sealFrame returns the wire bytes (frame header included) of a MESSAGE
// boxing one frame of data with the given ZMTP flags (flagMore,
// flagCommand).
func (c *curveCodec) sealFrame(flags byte, data []byte) []byte {
	pt := append(c.scratch[:0], 0)
	if flags&flagMore != 0 {
		pt[0] |= curveMsgMore
	}
	if flags&flagCommand != 0 {
		pt[0] |= curveMsgCommand
	}
	pt = append(pt, data...)
	out := c.sealPlain(pt)
	c.keepScratch(pt)
	return out
}

// sealPlain boxes a plaintext (flags byte and data) into a MESSAGE frame.
func (c *curveCodec) sealPlain(pt []byte) []byte {
	body := len(curveMsgName) + 8 + box.Overhead + len(pt)
	hl := 2
	if body > 255 {
		hl = 9
	}
	out := make([]byte, hl, hl+body)
	if hl == 9 {
		out[0] = flagLong
		binary.BigEndian.PutUint64(out[1:], uint64(body))
	} else {
		out[1] = byte(body)
	}
	n := c.sendNonce
	c.sendNonce++
	out = append(out, curveMsgName...)
	out = binary.BigEndian.AppendUint64(out, n)
	return box.SealAfterPrecomputation(out, pt, curveNonce(c.sendPrefix, n), &c.shared)
}

// curveKeepBuf is the largest buffer a codec keeps for the next frame
// (sent or read): a job's output event (a 64 KiB pipe read and its
// header) fits; a big reply's or request's is not held for the
// connection's life.
const curveKeepBuf = 80 << 10

// keepScratch keeps a plaintext buffer for the next frame unless it grew
// large (a big reply's is not held for the connection's life).
func (c *curveCodec) keepScratch(pt []byte) {
	if cap(pt) <= curveKeepBuf {
		c.scratch = pt[:0]
	} else {
		c.scratch = nil
	}
}

// sealWire boxes every frame of an encoded message (see encodeMessage,
// Publisher.SendParts: frame headers and bodies, a body possibly in
// several buffers), returning the boxed message and its size (what
// curveSealedSize said). The buffers of wire are only read.
func (c *curveCodec) sealWire(wire net.Buffers) (net.Buffers, int, error) {
	cur := bufCursor{bufs: wire}
	var out net.Buffers
	size := 0
	for !cur.done() {
		flags, n, err := nextFrame(&cur)
		if err != nil {
			return nil, 0, err
		}
		pt := c.scratch[:0]
		if uint64(cap(pt)) < 1+n {
			pt = make([]byte, 0, 1+n)
		}
		pt = pt[:1+n]
		pt[0] = 0
		if flags&flagMore != 0 {
			pt[0] |= curveMsgMore
		}
		if flags&flagCommand != 0 {
			pt[0] |= curveMsgCommand
		}
		cur.read(pt[1:])
		f := c.sealPlain(pt)
		c.keepScratch(pt)
		out = append(out, f)
		size += len(f)
	}
	return out, size, nil
}

// curveSealedSize is the size sealWire makes of wire, or why it cannot
// box it.
func curveSealedSize(wire net.Buffers) (int, error) {
	cur := bufCursor{bufs: wire}
	size := 0
	for !cur.done() {
		_, n, err := nextFrame(&cur)
		if err != nil {
			return 0, err
		}
		cur.skip(int(n))
		body := uint64(curveMsgOverhead) + n
		if body > 255 {
			size += 9 + int(body)
		} else {
			size += 2 + int(body)
		}
	}
	return size, nil
}

// nextFrame reads a frame's header from cur: its flags and body size,
// which cur holds.
func nextFrame(cur *bufCursor) (byte, uint64, error) {
	var hdr [9]byte
	if !cur.read(hdr[:2]) {
		return 0, 0, errors.New("curve: truncated frame header")
	}
	n := uint64(hdr[1])
	if hdr[0]&flagLong != 0 {
		if !cur.read(hdr[2:9]) {
			return 0, 0, errors.New("curve: truncated frame header")
		}
		n = binary.BigEndian.Uint64(hdr[1:9])
	}
	if n > uint64(cur.left()) {
		return 0, 0, fmt.Errorf("curve: frame of %d bytes, %d left", n, cur.left())
	}
	return hdr[0], n, nil
}

// readBox reads the next frame of r (at most max bytes) into the codec's
// buffer, reused frame after frame: open copies what it unboxes out of
// it. The body is good until the next readBox.
func (c *curveCodec) readBox(r io.Reader, max uint64) (byte, []byte, error) {
	flags, body, err := readFrameInto(r, max, c.rbuf)
	if err == nil && cap(body) <= curveKeepBuf {
		c.rbuf = body[:0]
	}
	return flags, body, err
}

// open unboxes the body of a MESSAGE frame: the frame's ZMTP flags
// (flagMore, flagCommand) and data (a new buffer: nacl opens nothing in
// place).
func (c *curveCodec) open(body []byte) (byte, []byte, error) {
	if len(body) < curveMsgOverhead || string(body[:len(curveMsgName)]) != curveMsgName {
		return 0, nil, &violation{"curve-protocol", errors.New("not a CURVE MESSAGE command")}
	}
	n := binary.BigEndian.Uint64(body[8:16])
	if n <= c.recvNonce {
		return 0, nil, &violation{"curve-replay", fmt.Errorf("MESSAGE nonce %d is not above the last one, %d", n, c.recvNonce)}
	}
	pt, ok := box.OpenAfterPrecomputation(make([]byte, 0, len(body)-16-box.Overhead), body[16:], curveNonce(c.recvPrefix, n), &c.shared)
	if !ok {
		return 0, nil, &violation{"curve-bad-box", fmt.Errorf("MESSAGE %d does not open", n)}
	}
	c.recvNonce = n
	var flags byte
	if pt[0]&curveMsgMore != 0 {
		flags |= flagMore
	}
	if pt[0]&curveMsgCommand != 0 {
		flags |= flagCommand
	}
	return flags, pt[1:], nil
}

// bufCursor reads a net.Buffers as one stream.
type bufCursor struct {
	bufs net.Buffers
	i    int // buffer
	off  int // in bufs[i]
}

func (c *bufCursor) done() bool {
	for c.i < len(c.bufs) && c.off >= len(c.bufs[c.i]) {
		c.i, c.off = c.i+1, 0
	}
	return c.i >= len(c.bufs)
}

func (c *bufCursor) left() int {
	n := 0
	for j := c.i; j < len(c.bufs); j++ {
		n += len(c.bufs[j])
	}
	return n - c.off
}

// skip moves n bytes on (n <= left()).
func (c *bufCursor) skip(n int) {
	for n > 0 && !c.done() {
		k := min(n, len(c.bufs[c.i])-c.off)
		c.off += k
		n -= k
	}
}

// read fills dst; it reports false when the stream ends first.
func (c *bufCursor) read(dst []byte) bool {
	for len(dst) > 0 {
		if c.done() {
			return false
		}
		k := copy(dst, c.bufs[c.i][c.off:])
		c.off += k
		dst = dst[k:]
	}
	return true
}
