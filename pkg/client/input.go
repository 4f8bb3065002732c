package client

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Write sends data to a job's stdin (pipe jobs spawned with Stdin) or
// terminal (PTY jobs); eof then closes stdin, or sends Ctrl-D to a terminal.
func (c *Client) Write(ctx context.Context, jobID string, data []byte, eof bool) (protocol.WriteResult, error) {
	return c.write(ctx, &protocol.WriteArgs{JobID: jobID, Data: data, EOF: eof})
}

// write sends the write op with a.
func (c *Client) write(ctx context.Context, a *protocol.WriteArgs) (protocol.WriteResult, error) {
	var r protocol.WriteResult
	if err := a.Validate(); err != nil {
		// (said here: a body over the request limit would only get the
		// connection closed)
		return r, err
	}
	err := c.Call(ctx, protocol.OpWrite, a, &r)
	return r, err
}

// Type sends data a person types at a terminal to a PTY job (as execctl
// attach does): the job's terminal treats it as its keyboard's, cutting a
// line over its line-mode limit as a terminal does rather than refusing
// the write (see protocol.WriteArgs.Typed).
func (c *Client) Type(ctx context.Context, jobID string, data []byte) (protocol.WriteResult, error) {
	return c.write(ctx, &protocol.WriteArgs{JobID: jobID, Data: data, Typed: true})
}

// Resize changes a PTY job's terminal size (the program gets SIGWINCH).
func (c *Client) Resize(ctx context.Context, jobID string, rows, cols int) error {
	return c.Call(ctx, protocol.OpResize, &protocol.ResizeArgs{JobID: jobID, Rows: rows, Cols: cols}, nil)
}

// Keys maps key names (case-insensitive) to the bytes a terminal sends for
// them. "C-x" (or "Ctrl-x") for any letter x is also accepted by KeyBytes.
var Keys = map[string]string{
	"enter": "\r", "return": "\r", "tab": "\t", "backspace": "\x7f", "escape": "\x1b", "esc": "\x1b",
	"space": " ", "up": "\x1b[A", "down": "\x1b[B", "right": "\x1b[C", "left": "\x1b[D",
	"home": "\x1b[H", "end": "\x1b[F", "pageup": "\x1b[5~", "pagedown": "\x1b[6~",
	"insert": "\x1b[2~", "delete": "\x1b[3~",
	"f1": "\x1bOP", "f2": "\x1bOQ", "f3": "\x1bOR", "f4": "\x1bOS", "f5": "\x1b[15~", "f6": "\x1b[17~",
	"f7": "\x1b[18~", "f8": "\x1b[19~", "f9": "\x1b[20~", "f10": "\x1b[21~", "f11": "\x1b[23~", "f12": "\x1b[24~",
	"ctrl-c": "\x03", "ctrl-d": "\x04", "ctrl-z": "\x1a", "ctrl-l": "\x0c", "ctrl-\\": "\x1c",
	"shift-tab": "\x1b[Z", "backtab": "\x1b[Z",
}

// ctrlPunct are the bytes of Ctrl with the punctuation keys that have one
// (as with letters: the key's code less 0x40).
var ctrlPunct = map[byte]byte{'@': 0, ' ': 0, '[': 0x1b, '\\': 0x1c, ']': 0x1d, '^': 0x1e, '_': 0x1f, '?': 0x7f}

// KeyBytes returns the bytes for a key name: a name of Keys; C-x /
// Ctrl-x for a letter x or one of @ [ \ ] ^ _ ?; M-x / Alt-x for Escape
// then x (x a key name or a character); or a single character, as is.
func KeyBytes(name string) ([]byte, error) {
	k := strings.ToLower(name)
	if v, ok := Keys[k]; ok {
		return []byte(v), nil
	}
	for _, p := range []string{"c-", "ctrl-", "ctrl+", "^"} {
		if rest, ok := strings.CutPrefix(k, p); ok && len(rest) == 1 {
			if rest[0] >= 'a' && rest[0] <= 'z' {
				return []byte{rest[0] - 'a' + 1}, nil
			}
			if b, ok := ctrlPunct[rest[0]]; ok {
				return []byte{b}, nil
			}
		}
	}
	for _, p := range []string{"m-", "alt-", "meta-", "alt+", "meta+"} {
		if len(k) > len(p) && strings.HasPrefix(k, p) {
			rest, err := KeyBytes(name[len(p):])
			if err != nil {
				return nil, err
			}
			return append([]byte{0x1b}, rest...), nil
		}
	}
	if utf8.RuneCountInString(name) == 1 && utf8.ValidString(name) {
		return []byte(name), nil // a character, as typed (case kept)
	}
	names := make([]string, 0, len(Keys))
	for n := range Keys {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("unknown key %q (known: %s; C-a..C-z and C-@ C-[ C-\\ C-] C-^ C-_ C-?; M-x or Alt-x for Escape then x; any single character)", name, strings.Join(names, ", "))
}

// SendKeys sends named keys (see Keys) to a PTY job, in order.
func (c *Client) SendKeys(ctx context.Context, jobID string, keys ...string) error {
	var b []byte
	for _, k := range keys {
		kb, err := KeyBytes(k)
		if err != nil {
			return err
		}
		b = append(b, kb...)
	}
	_, err := c.Write(ctx, jobID, b, false)
	return err
}

// Paste sends text as a paste: wrapped in bracketed-paste markers when the
// program turned bracketed paste on (JobInfo.BracketedPaste), as is otherwise.
func (c *Client) Paste(ctx context.Context, jobID, text string) error {
	info, err := c.Status(ctx, jobID)
	if err != nil {
		return err
	}
	b := []byte(text)
	if info.BracketedPaste {
		b = append(append([]byte("\x1b[200~"), b...), "\x1b[201~"...)
	}
	_, err = c.Write(ctx, jobID, b, false)
	return err
}

// Submit types text followed by Enter.
func (c *Client) Submit(ctx context.Context, jobID, text string) error {
	_, err := c.Write(ctx, jobID, []byte(text+"\r"), false)
	return err
}
