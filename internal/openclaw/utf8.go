package openclaw

import (
	"strings"
	"unicode/utf8"
)

// Output is sent as strings, so it is decoded as UTF-8. A character whose
// bytes were read in two reads (so ended up in two output events) comes
// out whole, in the later event: an event's data leaves out the bytes at
// its end that begin a character it does not finish (its tail, at most 3
// bytes), and the next output event of the same stream that starts with
// the bytes finishing it gets the character. So an event's data depends
// on itself and on the tail of the stream's previous output event only,
// and is the same whenever it is read (events, poll, subscribe). Bytes
// that are not UTF-8 become U+FFFD. A tail that nothing finishes (the
// stream's next event starts otherwise, or never comes) is not UTF-8
// either, and is dropped.

// decodeOutput decodes output data b of a stream whose previous output
// event left tail carry (nil: none), and returns its text and its own
// tail.
func decodeOutput(carry, b []byte) (string, []byte) {
	head, body, tail := splitOutput(carry, b)
	return textOf(head, body), tail
}

// splitOutput is decodeOutput without the decoding: the character that
// carry and b's first bytes make (head, nil if none), the rest of b to
// decode (body), and b's tail. It copies nothing but a head or a tail
// (a few bytes).
func splitOutput(carry, b []byte) (head, body, tail []byte) {
	if len(b) == 0 {
		return nil, nil, carry // (nothing read: nothing changes)
	}
	if len(carry) > 0 {
		need := runeLen(carry[0]) - len(carry)
		k := 0
		for k < need && k < len(b) && isCont(b[k]) {
			k++
		}
		switch {
		case k == 0:
			// Not finished: dropped (not UTF-8).
		case k < need && k == len(b):
			// Still not finished, and nothing else here: carried on.
			return nil, nil, append(append([]byte(nil), carry...), b...)
		default:
			head = append(append(head, carry...), b[:k]...) // (U+FFFD if short)
			b = b[k:]
		}
	}
	body, tail = splitTail(b)
	return head, body, tail
}

// textOf is head and body as valid UTF-8 (U+FFFD for what is not).
func textOf(head, body []byte) string {
	var s strings.Builder
	s.Grow(len(head) + len(body))
	s.Write(head)
	s.Write(body)
	text := s.String()
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return text
}

// splitTail splits off the end of b that begins a character b does not
// finish (a lead byte and fewer continuation bytes than it announces).
func splitTail(b []byte) (body, tail []byte) {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if !isCont(b[i]) {
			if runeLen(b[i]) > len(b)-i {
				return b[:i], b[i:]
			}
			break
		}
	}
	return b, nil
}

func isCont(c byte) bool { return c&0xc0 == 0x80 }

// runeLen is the length of the character lead byte c announces (1 for
// ASCII and for bytes that lead nothing).
func runeLen(c byte) int {
	switch {
	case c >= 0xc2 && c <= 0xdf:
		return 2
	case c >= 0xe0 && c <= 0xef:
		return 3
	case c >= 0xf0 && c <= 0xf4:
		return 4
	}
	return 1
}
