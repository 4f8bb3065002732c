package openclaw

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestDecodeOutput: the text of each output event of one stream, given
// the events' bytes in order.
func TestDecodeOutput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []string
		want   []string
	}{
		{"ascii", []string{"hello ", "world\n"}, []string{"hello ", "world\n"}},
		{"whole characters", []string{"é", "你好 🎉"}, []string{"é", "你好 🎉"}},
		{"é split", []string{"caf\xc3", "\xa9!"}, []string{"caf", "é!"}},
		{"é split, the second read only its end", []string{"\xc3", "\xa9"}, []string{"", "é"}},
		{"emoji in three reads", []string{"a\xf0\x9f", "\x8e", "\x89b"}, []string{"a", "", "🎉b"}},
		{"emoji in four reads", []string{"\xf0", "\x9f", "\x8e", "\x89"}, []string{"", "", "", "🎉"}},
		{"3-byte split after its lead", []string{"\xe4", "\xbd\xa0x"}, []string{"", "你x"}},
		{"a tail nothing finishes is dropped", []string{"a\xc3", "b"}, []string{"a", "b"}},
		{"a tail at the end is dropped", []string{"a\xc3"}, []string{"a"}},
		{"continuation bytes without a lead", []string{"\xa9x"}, []string{"\uFFFDx"}},
		{"invalid bytes inside", []string{"a\xffb\xfe"}, []string{"a\uFFFDb\uFFFD"}},
		{"a wrong continuation", []string{"\xe4\xbd", "\xc0z"}, []string{"", "\uFFFDz"}},
		{"a short finish is invalid", []string{"\xe4", "\xbdz"}, []string{"", "\uFFFDz"}},
		{"a surrogate is invalid", []string{"\xed\xa0", "\x80"}, []string{"", "\uFFFD"}},
		{"empty events", []string{"", "\xc3", "", "\xa9"}, []string{"", "", "", "é"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var carry []byte
			var got []string
			for _, ev := range tc.events {
				var text string
				text, carry = decodeOutput(carry, []byte(ev))
				if !utf8.ValidString(text) {
					t.Fatalf("%q: text %q is not UTF-8", ev, text)
				}
				got = append(got, text)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("texts %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDecodeOutputAnySplit: valid UTF-8 split anywhere into events comes
// out whole: the texts put together are the input.
func TestDecodeOutputAnySplit(t *testing.T) {
	s := "aé你🎉z"
	n := len(s)
	// Every way of cutting s at up to three places.
	for i := 0; i <= n; i++ {
		for j := i; j <= n; j++ {
			for k := j; k <= n; k++ {
				var carry []byte
				var out strings.Builder
				for _, part := range []string{s[:i], s[i:j], s[j:k], s[k:]} {
					var text string
					text, carry = decodeOutput(carry, []byte(part))
					out.WriteString(text)
				}
				if out.String() != s || carry != nil {
					t.Fatalf("cut at %d %d %d: %q (tail %q), want %q", i, j, k, out.String(), carry, s)
				}
			}
		}
	}
}

func FuzzDecodeOutput(f *testing.F) {
	f.Add([]byte("caf\xc3"), []byte("\xa9"))
	f.Add([]byte("\xf0\x9f"), []byte("\x8e\x89"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ta, carry := decodeOutput(nil, a)
		tb, tail := decodeOutput(carry, b)
		if !utf8.ValidString(ta) || !utf8.ValidString(tb) || len(carry) > 3 || len(tail) > 3 {
			t.Fatalf("%q %q: texts %q %q, tails %q %q", a, b, ta, tb, carry, tail)
		}
		if utf8.Valid(append(append([]byte(nil), a...), b...)) && ta+tb+string(tail) != string(a)+string(b) {
			t.Fatalf("valid %q+%q came out as %q+%q (tail %q)", a, b, ta, tb, tail)
		}
	})
}
