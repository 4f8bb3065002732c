package zmtp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestPubDirectWrites: messages written directly by the sender (nothing
// queued) and messages the socket only partly takes (the rest queued for
// the writer) arrive whole and in order, to two subscribers sharing each
// message's buffers; and a direct write after the connection was idle
// for longer than the write timeout still goes out (an expired write
// deadline once made it fail and drop the subscriber).
func TestPubDirectWrites(t *testing.T) {
	// (long enough for a subscriber of a race-built test on a loaded
	// machine to keep reading: at 300 ms one was cut off, once)
	const writeTimeout = time.Second
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "p.sock")
	p, err := ListenPub(context.Background(), endpoint, &Policy{WriteTimeout: writeTimeout}, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	subs := subscribers(t, p, "t", 2, func() (*Client, error) {
		return DialClient(context.Background(), "SUB", endpoint, time.Second, "")
	})
	// Big messages (several times a socket buffer) between small ones.
	const n = 40
	msgs := make([][]byte, n+5) // (made once: the readers compare, not rebuild)
	for i := range msgs {
		size := 100
		if i%5 == 2 {
			size = 3 << 20
		}
		msgs[i] = bytes.Repeat([]byte{byte(i)}, size)
		binary.BigEndian.PutUint32(msgs[i], uint32(i))
	}
	msg := func(i int) []byte { return msgs[i] }
	// The subscribers read all the time (one that stops reading for the
	// write timeout is cut off, by design).
	type result struct {
		i   int
		err error
	}
	results := make([]chan result, len(subs))
	for k, c := range subs {
		results[k] = make(chan result, n+5)
		go func() {
			for i := 0; i < n+5; i++ {
				m, err := c.Recv()
				switch {
				case err != nil:
				case len(m) != 2 || string(m[0]) != "t":
					err = fmt.Errorf("%d frames", len(m))
				case !bytes.Equal(m[1], msg(i)):
					err = fmt.Errorf("%d bytes starting %x", len(m[1]), m[1][:min(4, len(m[1]))])
				}
				results[k] <- result{i, err}
				if err != nil {
					return
				}
			}
		}()
	}
	recvAll := func(from, to int) {
		t.Helper()
		for k := range subs {
			for i := from; i < to; i++ {
				select {
				case r := <-results[k]:
					if r.err != nil {
						t.Fatalf("subscriber %d, message %d: %v", k, r.i, r.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("subscriber %d: message %d never came", k, i)
				}
			}
		}
	}
	for i := 0; i < n; i++ {
		// Two buffers per message, shared by both subscribers' queues.
		b := msg(i)
		if err := p.SendParts([]byte("t"), b[:len(b)/2], b[len(b)/2:]); err != nil {
			t.Fatal(err)
		}
	}
	recvAll(0, n)
	// Idle past the write timeout (a deadline set before expires), then
	// direct writes again.
	time.Sleep(3 * writeTimeout) // the condition under test is elapsed time
	for i := n; i < n+5; i++ {
		if err := p.SendParts([]byte("t"), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	recvAll(n, n+5)
	if p.Subscribers() != 2 {
		t.Fatalf("%d subscribers left, want 2", p.Subscribers())
	}
}
