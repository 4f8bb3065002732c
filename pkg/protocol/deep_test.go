package protocol

import (
	"bytes"
	"testing"
)

// TestDeepNestingDoesNotCrash: a request of maximum size made of nested
// arrays must be rejected, not overflow the stack.
func TestDeepNestingDoesNotCrash(t *testing.T) {
	prefix := []byte{0x83, 0xa1, 'v', 0x02, 0xa2, 'o', 'p', 0xa6, 'h', 'e', 'a', 'l', 't', 'h', 0xa4, 'a', 'r', 'g', 's'}
	for _, open := range []byte{0x91, 0x81} {
		body := append(append([]byte{}, prefix...), bytes.Repeat([]byte{open}, MaxRequestBytes-len(prefix)-1)...)
		if open == 0x81 {
			// map of one: key nil, value nested map
			body = append(append([]byte{}, prefix...), bytes.Repeat([]byte{0x81, 0xc0}, (MaxRequestBytes-len(prefix)-1)/2)...)
		}
		body = append(body, 0xc0)
		req, err := DecodeRequest(body, 0)
		if err == nil {
			var a SpawnArgs
			_ = DecodeArgs(req, &a)
		}
	}
}
