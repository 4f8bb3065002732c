package zmtp

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
)

// longHeader is a frame header with the long flag whatever the size.
func longHeader(flags byte, n int) []byte {
	h := make([]byte, 9)
	h[0] = flags | flagLong
	binary.BigEndian.PutUint64(h[1:], uint64(n))
	return h
}

// splitAt cuts b into buffers of at most k bytes (k > 0), some empty.
func splitAt(b []byte, k int) net.Buffers {
	var out net.Buffers
	for len(b) > 0 {
		m := min(k, len(b))
		out = append(out, b[:m], nil)
		b = b[m:]
	}
	return out
}

// TestCurveSealedSizeMatchesSealWire: the size counted when a message is
// queued is what the writer's boxing makes of it, for every frame shape:
// empty frames, the short/long boundary of the boxed frame (222/223-byte
// bodies) and of the plain one (255/256), long-flag headers of small
// sizes, headers and bodies split across buffers; and the boxes open to
// the frames sent.
func TestCurveSealedSizeMatchesSealWire(t *testing.T) {
	cc, sc, _ := curvePair(t)
	sizes := []int{0, 1, 221, 222, 223, 224, 254, 255, 256, 257, 16<<10 - 40, 16 << 10, 70000}
	check := func(name string, wire net.Buffers, want [][]byte) {
		t.Helper()
		var flat []byte
		for _, b := range wire {
			flat = append(flat, b...)
		}
		n, err := curveSealedSize(wire)
		if err != nil {
			t.Fatalf("%s: curveSealedSize: %v", name, err)
		}
		sealed, m, err := sc.sealWire(wire)
		if err != nil {
			t.Fatalf("%s: sealWire: %v", name, err)
		}
		real := 0
		for _, f := range sealed {
			real += len(f)
		}
		if n != m || n != real {
			t.Fatalf("%s: counted %d, sealWire said %d, made %d", name, n, m, real)
		}
		var after []byte
		for _, b := range wire {
			after = append(after, b...)
		}
		if !bytes.Equal(flat, after) {
			t.Fatalf("%s: the buffers changed", name)
		}
		if len(sealed) != len(want) {
			t.Fatalf("%s: %d frames, want %d", name, len(sealed), len(want))
		}
		for i, f := range sealed {
			_, d, err := cc.open(frameBody(f))
			if err != nil || !bytes.Equal(d, want[i]) {
				t.Fatalf("%s: frame %d: %d bytes, %v", name, i, len(d), err)
			}
		}
	}
	for _, a := range sizes {
		for _, b := range sizes {
			fa, fb := bytes.Repeat([]byte{'a'}, a), bytes.Repeat([]byte{'b'}, b)
			wire, _ := encodeMessage([][]byte{fa, fb})
			check("encoded", wire, [][]byte{fa, fb})
			// Long-flag headers of small sizes, as a hostile or odd
			// encoder would write them, split byte by byte.
			var flat []byte
			flat = append(append(flat, longHeader(flagMore, a)...), fa...)
			flat = append(append(flat, longHeader(0, b)...), fb...)
			check("long", splitAt(flat, 1), [][]byte{fa, fb})
			check("split7", splitAt(flat, 7), [][]byte{fa, fb})
		}
	}
	// Publisher.SendParts' shape: the body in several parts, some empty.
	p1, p2 := bytes.Repeat([]byte{'x'}, 200), bytes.Repeat([]byte{'y'}, 30)
	bh := []byte{0, byte(len(p1) + len(p2))}
	wire := net.Buffers{{flagMore, 1}, []byte("t"), bh, p1, nil, p2}
	check("parts", wire, [][]byte{[]byte("t"), append(append([]byte(nil), p1...), p2...)})
	// Truncated: refused by both alike.
	for _, w := range []net.Buffers{{{0}}, {{flagLong, 0, 0}}, {{0, 5}, []byte("abc")}} {
		if _, err := curveSealedSize(w); err == nil {
			t.Fatalf("curveSealedSize took %q", w)
		}
		if _, _, err := sc.sealWire(w); err == nil {
			t.Fatalf("sealWire took %q", w)
		}
	}
}
