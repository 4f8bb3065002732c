package client

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestStreamBufWriteTo: io.Copy through WriteTo gets the same bytes as
// through Read, stops at an in-band loss error with it, and ends with nil
// at the end of the stream (or the error that ended following).
func TestStreamBufWriteTo(t *testing.T) {
	s := newStreamBuf(1 << 20)
	s.put([]byte("hello "))
	s.put([]byte("world"))
	s.close(nil)
	var out bytes.Buffer
	if n, err := io.Copy(&out, s); err != nil || n != 11 || out.String() != "hello world" || s.size != 0 {
		t.Fatalf("copy: %d %v %q size %d", n, err, out.String(), s.size)
	}

	lost := &OutputLostError{}
	s = newStreamBuf(1 << 20)
	s.put([]byte("a"))
	s.putErr(lost)
	s.put([]byte("b"))
	s.close(nil)
	out.Reset()
	if _, err := io.Copy(&out, s); !errors.Is(err, lost) || out.String() != "a" {
		t.Fatalf("loss: %v %q", err, out.String())
	}
	if _, err := io.Copy(&out, s); err != nil || out.String() != "ab" {
		t.Fatalf("after the loss: %v %q", err, out.String())
	}

	ended := errors.New("supervisor restarted")
	s = newStreamBuf(1 << 20)
	s.close(ended)
	if _, err := io.Copy(io.Discard, s); !errors.Is(err, ended) {
		t.Fatalf("ended: %v", err)
	}
}
