package outlog

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// writev writes every piece in order, however the kernel cuts it: more
// pieces than one call takes, and short writes (a pipe takes 64 KiB at a
// time).
func TestWritevWhole(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var bufs [][]byte
	var want []byte
	for i := range 3000 {
		b := bytes.Repeat([]byte{byte(i)}, 1+i%700)
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	n, err := writev(w, bufs)
	w.Close()
	if err != nil || n != int64(len(want)) {
		t.Fatalf("writev: %d of %d, %v", n, len(want), err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("read back %d bytes, not what was written", len(b))
	}
}
