package zmtp

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/crypto/curve25519"
)

func TestZ85RFC32Vector(t *testing.T) {
	raw := []byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}
	s, err := Z85Encode(raw)
	if err != nil || s != "HelloWorld" {
		t.Fatalf("encode = %q, %v; want HelloWorld", s, err)
	}
	b, err := Z85Decode("HelloWorld")
	if err != nil || !bytes.Equal(b, raw) {
		t.Fatalf("decode = %x, %v", b, err)
	}
}

// The key pairs of libzmq's zmq_curve(7) example: each public key must be
// the one its secret key gives, which checks the decoder on real keys.
func TestZ85LibzmqKeyPairs(t *testing.T) {
	for _, kp := range [][2]string{
		{"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7", "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"},
		{"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "D:)Q[IlAW!ahhC2ac:9*A}h:p?([4%wOTJ%JR%cs"},
	} {
		pub, err := Z85Decode(kp[0])
		if err != nil {
			t.Fatal(err)
		}
		sec, err := Z85Decode(kp[1])
		if err != nil {
			t.Fatal(err)
		}
		got, err := curve25519.X25519(sec, curve25519.Basepoint)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pub) {
			t.Errorf("public key of %s is %x, want %x (%s)", kp[1], got, pub, kp[0])
		}
		if s, _ := Z85Encode(pub); s != kp[0] {
			t.Errorf("round trip %q -> %q", kp[0], s)
		}
	}
}

func TestZ85Errors(t *testing.T) {
	for _, s := range []string{"Hell", "Hello World", "%%%%%", "Hell\x00"} {
		if _, err := Z85Decode(s); !errors.Is(err, ErrZ85) {
			t.Errorf("Z85Decode(%q) = %v, want ErrZ85", s, err)
		}
	}
	if _, err := Z85Encode([]byte{1, 2, 3}); err == nil {
		t.Error("3 bytes encoded")
	}
	for n := 0; n < 64; n += 4 {
		b := bytes.Repeat([]byte{0xFF, 0x00, 0x7F, 0x80}, n/4)
		s, _ := Z85Encode(b)
		if d, err := Z85Decode(s); err != nil || !bytes.Equal(d, b) {
			t.Fatalf("round trip of %x: %x, %v", b, d, err)
		}
	}
}

func FuzzZ85(f *testing.F) {
	f.Add("HelloWorld")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Z85Decode(s)
		if err != nil {
			return
		}
		if e, err := Z85Encode(b); err != nil || e != s {
			t.Fatalf("%q decodes to %x, which encodes to %q (%v)", s, b, e, err)
		}
	})
}
