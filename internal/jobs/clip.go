package jobs

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on client input echoed in log lines and error messages: a spawn
// may carry 256 KiB of argv and a cwd as long as a request, and a log
// line (or a spawn error a finished job keeps) must not grow with them.
const (
	// LogArgBytes bounds one argv element (or cwd, shell) in a log line.
	LogArgBytes = 256
	// LogArgvBytes bounds all of argv in a log line; LogArgs its elements.
	LogArgvBytes = 1024
	LogArgs      = 16
	// maxErrMsgBytes bounds a spawn error's message (kept by the job,
	// logged, sent to the client).
	maxErrMsgBytes = 2048
)

// Clip returns s if it is at most max bytes long, else its first bytes
// (cut at a UTF-8 boundary) followed by a marker with its full length:
// "abc...[truncated, 122880 bytes]". The result is at most max bytes
// plus the marker.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "...[truncated, " + strconv.Itoa(len(s)) + " bytes]"
}

// ClipArgv returns argv for a log line: each element clipped to perArg
// bytes, elements past maxArgs or past total bytes in all left out and
// counted in a last element "...[N more arguments, M bytes]". argv
// itself is returned when nothing needs cutting.
func ClipArgv(argv []string, maxArgs, perArg, total int) []string {
	size := 0
	for _, a := range argv {
		size += len(a)
	}
	if len(argv) <= maxArgs && size <= total {
		fits := true
		for _, a := range argv {
			if len(a) > perArg {
				fits = false
				break
			}
		}
		if fits {
			return argv
		}
	}
	out := make([]string, 0, min(len(argv), maxArgs)+1)
	used := 0
	i := 0
	for ; i < len(argv) && i < maxArgs; i++ {
		room := min(perArg, total-used)
		if room <= 0 && i > 0 {
			break
		}
		a := Clip(argv[i], max(room, 0))
		out = append(out, a)
		used += min(len(argv[i]), max(room, 0))
	}
	if rest := len(argv) - i; rest > 0 {
		b := 0
		for _, a := range argv[i:] {
			b += len(a)
		}
		out = append(out, "...["+strconv.Itoa(rest)+" more arguments, "+strconv.Itoa(b)+" bytes]")
	}
	return out
}

// logArgv is argv as the job's log lines show it.
func logArgv(argv []string) []string { return ClipArgv(argv, LogArgs, LogArgBytes, LogArgvBytes) }

// quoteClip quotes client input for an error message, clipped.
func quoteClip(s string) string { return strconv.Quote(Clip(s, LogArgBytes)) }

// clippedError is an error whose message is clipped (maxErrMsgBytes); it
// unwraps to the original.
type clippedError struct {
	msg string
	err error
}

func (e *clippedError) Error() string { return e.msg }
func (e *clippedError) Unwrap() error { return e.err }

// clipErr bounds err's message, and makes it valid UTF-8 (it is sent as
// a msgpack str, and may quote bytes from the system, such as a path
// found in the supervisor's PATH); nil stays nil.
func clipErr(err error) error {
	if err == nil {
		return err
	}
	msg := err.Error()
	if len(msg) <= maxErrMsgBytes && utf8.ValidString(msg) {
		return err
	}
	return &clippedError{msg: strings.ToValidUTF8(Clip(msg, maxErrMsgBytes), "\uFFFD"), err: err}
}
