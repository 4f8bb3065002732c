package keeper

import (
	"bytes"
	"strings"
	"sync"
)

// maxLineBytes bounds one kept line (a process writing without newlines
// must not grow the keeper).
const maxLineBytes = 4 << 10

// tail is an io.Writer keeping the last n lines written to it.
type tail struct {
	mu      sync.Mutex
	n       int
	done    []string // complete lines, oldest first (at most n)
	partial []byte   // the line being written
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for rest := p; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			t.add(rest)
			break
		}
		t.add(rest[:i])
		t.done = append(t.done, strings.ToValidUTF8(string(t.partial), "\uFFFD"))
		t.partial = t.partial[:0]
		if len(t.done) > t.n {
			t.done = append(t.done[:0], t.done[len(t.done)-t.n:]...)
		}
		rest = rest[i+1:]
	}
	return len(p), nil
}

// add appends b to the partial line, up to maxLineBytes.
func (t *tail) add(b []byte) {
	if room := maxLineBytes - len(t.partial); room > 0 {
		t.partial = append(t.partial, b[:min(len(b), room)]...)
	}
}

// lines returns the last n lines (a partial last line included).
func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := append([]string(nil), t.done...)
	if len(t.partial) > 0 {
		out = append(out, strings.ToValidUTF8(string(t.partial), "\uFFFD"))
	}
	if len(out) > t.n {
		out = out[len(out)-t.n:]
	}
	return out
}
