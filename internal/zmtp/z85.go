package zmtp

import (
	"errors"
	"fmt"
)

// Z85 (ZeroMQ RFC 32) is how CURVE keys are written: 40 printable
// characters for 32 bytes, as libzmq's zmq_curve_keypair and zmq_z85_encode
// write them. Only whole 4-byte groups (5 characters) are encoded.

const z85Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"

// z85Decoder maps a character to its digit, 0xFF for one not in the alphabet.
var z85Decoder = func() (d [256]byte) {
	for i := range d {
		d[i] = 0xFF
	}
	for i := 0; i < len(z85Alphabet); i++ {
		d[z85Alphabet[i]] = byte(i)
	}
	return d
}()

// Z85Encode encodes b, whose length must be a multiple of 4.
func Z85Encode(b []byte) (string, error) {
	if len(b)%4 != 0 {
		return "", fmt.Errorf("z85: %d bytes is not a multiple of 4", len(b))
	}
	out := make([]byte, 0, len(b)/4*5)
	for i := 0; i < len(b); i += 4 {
		v := uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3])
		var g [5]byte
		for j := 4; j >= 0; j-- {
			g[j] = z85Alphabet[v%85]
			v /= 85
		}
		out = append(out, g[:]...)
	}
	return string(out), nil
}

// ErrZ85 says a string is not Z85.
var ErrZ85 = errors.New("not Z85")

// Z85Decode decodes s, whose length must be a multiple of 5.
func Z85Decode(s string) ([]byte, error) {
	if len(s)%5 != 0 {
		return nil, fmt.Errorf("%w: %d characters is not a multiple of 5", ErrZ85, len(s))
	}
	out := make([]byte, 0, len(s)/5*4)
	for i := 0; i < len(s); i += 5 {
		var v uint64
		for j := 0; j < 5; j++ {
			d := z85Decoder[s[i+j]]
			if d == 0xFF {
				return nil, fmt.Errorf("%w: character %q at %d", ErrZ85, s[i+j], i+j)
			}
			v = v*85 + uint64(d)
		}
		if v > 0xFFFFFFFF { // ("%%%%%" and the like overflow 32 bits)
			return nil, fmt.Errorf("%w: group %q at %d exceeds 32 bits", ErrZ85, s[i:i+5], i)
		}
		out = append(out, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return out, nil
}
