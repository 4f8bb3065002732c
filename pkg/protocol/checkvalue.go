package protocol

import (
	"fmt"
	"unicode/utf8"
)

// maxNesting bounds how deeply arrays and maps may nest in a message the
// generic decoder reads. The protocol itself nests four deep at most; the
// hand-written decoders skip up to 65 levels below a field, so this must
// stay above 67 for whatever they accept to be accepted here too.
const maxNesting = 100

// checkValue walks the msgpack value at the start of b, the one the
// generic decoder (github.com/vmihailenco/msgpack/v5) would read, without
// allocating. It fails unless
//
//   - every str, bin, array or map length it declares fits in the bytes
//     left (an array or map element takes at least one byte),
//   - it contains no ext value (the protocol has none), and
//   - arrays and maps nest at most maxNesting deep.
//
// The generic decoder trusts declared lengths: it preallocates a typed
// slice for the whole element count before reading an element (v5.4.x
// ignores its own 1e6-element cap: vmihailenco/msgpack issue 401), and a
// str/bin/ext read grows the pooled decoder's buffer towards the declared
// length, keeping it across calls. A few hostile bytes could so make a
// decode allocate gigabytes, or crash with "fatal error: out of memory".
// An ext value is refused because the generic decoder reads a map length
// from inside an ext (ignoring its declared size), which would let the
// rest of the message be read out of step with what was checked here.
// Bytes after the value are not looked at (the generic decoder ignores
// them too).
func checkValue(b []byte) error { return checkValueMax(b, 0) }

// Past maxSmallList elements, an array or map must hold bigElemBytes of
// encoding per element (see checkValueMax).
const (
	maxSmallList = 4096
	bigElemBytes = 32
)

// checkValueMax is checkValue that also refuses (CodeTooLarge) an array
// or map of more than maxElems elements (0: no such bound). Fitting the
// bytes is not enough for requests: the generic decoder allocates a
// whole typed element per declared element (16-32 bytes for a string of
// one byte, more for a struct) before reading any, so a 1 MiB request
// could make the server allocate tens of MiB; requests carry at most
// MaxArgs elements in any array or map.
func checkValueMax(b []byte, maxElems uint64) error {
	_, err := checkValueEnd(b, maxElems, maxNesting)
	return err
}

// checkValueEnd is checkValueMax allowing arrays and maps to nest
// maxDepth deep (at most maxNesting); it returns the length of the value
// checked. The hand-written request decoders skip unknown keys with it,
// one level below the map they read (maxNesting-1), so that what they
// pass over is held to the bounds the generic path applies to the whole
// message.
func checkValueEnd(b []byte, maxElems uint64, maxDepth int) (int, error) {
	n, _, err := walkValue(b, maxElems, maxDepth, false)
	return n, err
}

// walkValue is checkValueEnd also finding, with strs, the first str that
// is not valid UTF-8: badStr is its offset in b (-1: none; not looked
// for without strs). Such a str is not an error here: the request
// decoders name the field it is in, where they can (checkUTF8).
func walkValue(b []byte, maxElems uint64, maxDepth int, strs bool) (n, badStr int, err error) {
	badStr = -1
	maxDepth = min(maxDepth, maxNesting)
	m := mp{b: b}
	var left [maxNesting + 1]uint64 // values still to read at each open level
	left[0] = 1
	depth := 0
	for {
		for left[depth] == 0 {
			if depth == 0 {
				return m.i, badStr, nil
			}
			depth--
		}
		left[depth]--
		at := m.i
		c, err := m.byte()
		if err != nil {
			return 0, -1, fmt.Errorf("msgpack: truncated: a value is missing at byte %d", at)
		}
		var size, elems uint64 // bytes to pass over, values to read inside
		what := ""
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
			continue
		case c >= 0x80 && c <= 0x8f:
			elems, what = 2*uint64(c&0x0f), "map"
		case c >= 0x90 && c <= 0x9f:
			elems, what = uint64(c&0x0f), "array"
		case c >= 0xa0 && c <= 0xbf:
			size, what = uint64(c&0x1f), "str"
		case c == 0xc1:
			return 0, -1, fmt.Errorf("msgpack: invalid code 0xc1 at byte %d", at)
		case c >= 0xc7 && c <= 0xc9 || c >= 0xd4 && c <= 0xd8:
			return 0, -1, fmt.Errorf("msgpack: ext value (code %#x) at byte %d; the protocol has no ext types", c, at)
		case c == 0xca || c == 0xce || c == 0xd2:
			size, what = 4, "number"
		case c == 0xcb || c == 0xcf || c == 0xd3:
			size, what = 8, "number"
		case c == 0xcc || c == 0xd0:
			size, what = 1, "number"
		case c == 0xcd || c == 0xd1:
			size, what = 2, "number"
		default:
			// 0xc4-0xc6 bin, 0xd9-0xdb str, 0xdc-0xdd array, 0xde-0xdf map:
			// a big-endian length of 1, 2 or 4 bytes follows.
			k := 4
			switch c {
			case 0xc4, 0xd9:
				k = 1
			case 0xc5, 0xda, 0xdc, 0xde:
				k = 2
			}
			n, err := m.be(k)
			if err != nil {
				return 0, -1, fmt.Errorf("msgpack: truncated: the length at byte %d is cut short", at)
			}
			switch {
			case c <= 0xc6:
				size, what = n, "bin"
			case c <= 0xdb:
				size, what = n, "str"
			case c <= 0xdd:
				elems, what = n, "array"
			default:
				elems, what = 2*n, "map"
			}
		}
		count := elems // (array elements, map entries)
		if what == "map" {
			count /= 2
		}
		if maxElems > 0 && count > maxElems {
			return 0, -1, Errorf(CodeTooLarge, "msgpack: %s of %d elements at byte %d; at most %d are accepted", what, count, at, maxElems)
		}
		rest := uint64(len(b) - m.i)
		if size > rest || elems > rest {
			n, unit := size, "bytes"
			switch {
			case what == "map":
				n, unit = count, "entries"
			case elems > 0:
				n, unit = count, "elements"
			}
			return 0, -1, fmt.Errorf("msgpack: %s of %d %s at byte %d, but only %d bytes follow", what, n, unit, at, rest)
		}
		// A big array or map must average bigElemBytes per element:
		// none of the protocol's big lists (jobs, events, chunks) has
		// smaller ones, and the generic decoder allocates a whole typed
		// element (up to ~850 bytes for a JobInfo, twice) per declared
		// one before reading any.
		if count > maxSmallList && count*bigElemBytes > rest {
			return 0, -1, fmt.Errorf("msgpack: %s of %d elements at byte %d in %d bytes: elements of a list that long take at least %d bytes each", what, count, at, rest, bigElemBytes)
		}
		if strs && what == "str" && badStr < 0 && !utf8.Valid(b[m.i:m.i+int(size)]) {
			badStr = at
		}
		m.i += int(size)
		if elems > 0 {
			if depth >= maxDepth {
				return 0, -1, fmt.Errorf("msgpack: arrays and maps nest more than %d deep (at byte %d)", maxDepth, at)
			}
			depth++
			left[depth] = elems
		}
	}
}
