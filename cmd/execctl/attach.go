package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// detachKey ends an attach session without touching the job (Ctrl-]).
const detachKey = 0x1d

// AttachCommand connects the operator's terminal to a PTY job.
type AttachCommand struct{}

// Synopsis implements command.
func (*AttachCommand) Synopsis() string {
	return "interactive session with a pty job (Ctrl-] detaches, the job keeps running): attach JOB"
}

// Run implements command.
func (*AttachCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("attach", g)
	tail := fs.Int64("tail", 4096, "replay this many bytes of recent output first")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	info, err := g.on(id).Status(ctx, id)
	if err != nil {
		return 0, err
	}
	if !info.Pty {
		return 0, &usageError{msg: fmt.Sprintf("job %s has no terminal", id), hint: "attach works with jobs spawned with --pty; use 'execctl logs -f' and 'execctl write' for others"}
	}
	if info.Finished() {
		// (a valid command for a job that is over: not a usage error)
		return 0, fmt.Errorf("job %s has already ended (%s): nothing to attach to; its output: execctl logs %s", id, info.Reason, id)
	}
	in, ok := g.stdin.(*os.File)
	if !ok || !isTerminal(int(in.Fd())) {
		return 0, &usageError{msg: "attach needs a terminal on standard input", hint: "run it in an interactive shell (or under tmux)"}
	}
	restore, err := makeRaw(int(in.Fd()))
	if err != nil {
		return 0, fmt.Errorf("attach: raw mode: %w", err)
	}
	defer restore()
	// Read the terminal through a non-blocking duplicate so that the reader
	// can be stopped (closing it interrupts Read) when the job ends.
	input, err := pollableDup(int(in.Fd()))
	if err != nil {
		return 0, fmt.Errorf("attach: %w", err)
	}
	defer func() { _ = unix.SetNonblock(int(in.Fd()), false) }()
	fmt.Fprintf(g.stderr, "[attached to %s; Ctrl-] detaches]\r\n", id)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Recent output first, then everything new from the seq after it.
	out := &terminalWriter{w: g.stdout}
	if *tail > 0 {
		if recent, job, err := lastOutput(ctx, g, info, *tail); err == nil {
			_, _ = out.Write(stripTerminalQueries(recent))
			info = job
		}
	}
	// Forward the terminal size now and on every SIGWINCH.
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	var sentMu sync.Mutex
	var sentRows, sentCols int // the size this terminal last gave the job
	sendSize := func() {
		if ws, err := unix.IoctlGetWinsize(int(in.Fd()), unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
			r, c := int(min(ws.Row, protocol.MaxTermSize)), int(min(ws.Col, protocol.MaxTermSize))
			if g.on(id).Resize(ctx, id, r, c) == nil {
				sentMu.Lock()
				sentRows, sentCols = r, c
				sentMu.Unlock()
			}
		}
	}
	sendSize()
	// The job's own size comes back when this terminal leaves (a gateway
	// driving it at its size found the attaching terminal's after a
	// detach).
	if info.Rows > 0 && info.Cols > 0 {
		rows, cols := info.Rows, info.Cols
		defer func() {
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer rcancel()
			// Only if the size is still the one this terminal gave it
			// (another client's resize, or another attach's, stays).
			sentMu.Lock()
			r, c := sentRows, sentCols
			sentMu.Unlock()
			if now, err := g.on(id).Status(rctx, id); err == nil && now.Rows == uint16(r) && now.Cols == uint16(c) && !now.Finished() {
				_ = g.on(id).Resize(rctx, id, int(rows), int(cols))
			}
		}()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer input.Close()
	defer cancel()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				sendSize()
			}
		}
	}()
	detached := make(chan struct{})
	go func() {
		defer wg.Done()
		buf := make([]byte, 4096)
		for {
			n, err := input.Read(buf)
			if n > 0 {
				data := buf[:n]
				if i := indexByte(data, detachKey); i >= 0 {
					if i > 0 {
						_, _ = g.on(id).Type(ctx, id, data[:i])
					}
					close(detached)
					cancel()
					return
				}
				if _, werr := g.on(id).Type(ctx, id, data); werr != nil && ctx.Err() == nil {
					fmt.Fprintf(g.stderr, "\r\n[input not delivered: %v]\r\n", werr)
				}
			}
			if err != nil || ctx.Err() != nil {
				return
			}
		}
	}()
	var final protocol.ExitPayload
	ended := false
	err = g.on(id).Follow(ctx, id, info.LastSeq+1, func(ev protocol.Event) error {
		switch ev.Kind {
		case protocol.KindStdout, protocol.KindStderr:
			var p protocol.OutputPayload
			if err := ev.DecodePayload(&p); err != nil {
				return err
			}
			_, err := out.Write(p.Data)
			return err
		case protocol.KindGap:
			// (output this terminal did not keep up with: said, not
			// spliced silently)
			if !lostOutput(ev) {
				break
			}
			fmt.Fprint(g.stderr, "\r\n")
			gapNotice(g, id, ev)
			fmt.Fprint(g.stderr, "\r")
		case protocol.KindExited, protocol.KindFailed:
			ended = true
			return ev.DecodePayload(&final)
		}
		return nil
	})
	select {
	case <-detached:
		restore()
		fmt.Fprintf(g.stderr, "\n[detached from %s; it keeps running]\n", id)
		return exitOK, nil
	default:
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return 0, err
	}
	restore()
	if ended {
		fmt.Fprintf(g.stderr, "\n[%s ended: %s]\n", id, final.Reason)
		return exitCodeOf(final, g, id), nil
	}
	return exitOK, nil
}

// pollableDup opens the terminal fd is on anew, in non-blocking mode, so
// that Go's poller can interrupt reads on it. Opened anew (through
// /proc/self/fd), not duplicated: a duplicate shares its open file, and
// with it the non-blocking flag, with stdout when both are the terminal,
// and writes of output then failed with EAGAIN (attach exited mid-stream
// whenever the terminal was slower than the job). A dup is the fallback.
func pollableDup(fd int) (*os.File, error) {
	if f, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", fd), os.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		return f, nil
	}
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, fmt.Errorf("dup terminal: %w", err)
	}
	if err := unix.SetNonblock(d, true); err != nil {
		unix.Close(d)
		return nil, fmt.Errorf("terminal non-blocking: %w", err)
	}
	return os.NewFile(uintptr(d), "terminal"), nil
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// makeRaw puts the terminal in raw mode (as cfmakeraw) and returns a
// function that restores it (safe to call twice).
func makeRaw(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN] = 1
	raw.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }) }, nil
}

// lastOutput returns the last n bytes of info's job's retained output (and
// the job as the last poll saw it). They are usually the n offsets before
// its end; a service resumed after a supervisor crash has skipped offsets
// in between (see docs/protocol.md), and then the retained output is read
// from its start to find them.
func lastOutput(ctx context.Context, g *globals, info protocol.JobInfo, n int64) ([]byte, protocol.JobInfo, error) {
	read := func(from int64) ([]byte, protocol.JobInfo, error) {
		var out []byte
		for cur := from; ; {
			res, err := g.on(info.JobID).Poll(ctx, info.JobID, cur, 0)
			if err != nil {
				return nil, info, err
			}
			for _, c := range res.Chunks {
				out = append(out, c.Data...)
			}
			if int64(len(out)) > n {
				out = out[int64(len(out))-n:]
			}
			if !res.More {
				return out, res.Job, nil
			}
			cur = res.Next
		}
	}
	from := max(info.RetainedFrom, info.OutputEnd-n)
	out, job, err := read(from)
	if err == nil && int64(len(out)) < n && job.RetainedFrom < from {
		return read(job.RetainedFrom) // (skipped offsets in the way)
	}
	return out, job, err
}

// terminalWriter writes all of what it is given to w, waiting while w (a
// non-blocking file: the terminal, when it was made so) takes no more.
type terminalWriter struct{ w io.Writer }

func (t *terminalWriter) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n, err := t.w.Write(p[done:])
		done += n
		if err == nil {
			continue
		}
		f, ok := t.w.(*os.File)
		if !ok || !errors.Is(err, syscall.EAGAIN) {
			return done, err
		}
		// (not f.Fd(), which would make the file blocking again, and
		// with it a duplicate of the terminal reading our input)
		rc, rerr := f.SyscallConn()
		if rerr != nil {
			return done, err
		}
		_ = rc.Control(func(fd uintptr) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			_, _ = unix.Poll(pfd, 1000)
		})
	}
	return done, nil
}

// stripTerminalQueries removes from replayed output the sequences that
// ask the terminal for an answer (cursor position and status reports,
// device attributes, mode and colour queries): the program that asked
// them is not waiting any more, and the answers this terminal would send
// reach the job as typed input (a prompt filled with ^[[12;1R at every
// attach).
func stripTerminalQueries(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		if b[i] != 0x1b || i+1 >= len(b) {
			out = append(out, b[i])
			i++
			continue
		}
		switch b[i+1] {
		case '[': // CSI: parameter bytes, intermediate bytes, a final byte
			j := i + 2
			for j < len(b) && b[j] >= 0x30 && b[j] <= 0x3f {
				j++
			}
			k := j
			for k < len(b) && b[k] >= 0x20 && b[k] <= 0x2f {
				k++
			}
			if k < len(b) && b[k] >= 0x40 && b[k] <= 0x7e {
				params, inter, final := b[i+2:j], b[j:k], b[k]
				if !csiQuery(params, inter, final) {
					out = append(out, b[i:k+1]...)
				}
				i = k + 1
				continue
			}
		case ']', 'P': // OSC, DCS: to BEL (OSC) or ST
			j := i + 2
			for j < len(b) && !(b[i+1] == ']' && b[j] == 0x07) && !(b[j] == 0x1b && j+1 < len(b) && b[j+1] == '\\') {
				j++
			}
			if j < len(b) {
				end := j + 1
				if b[j] == 0x1b {
					end = j + 2
				}
				body := b[i+2 : j]
				query := b[i+1] == ']' && bytes.HasSuffix(body, []byte(";?")) || // colours: 4;n;? 10;? 11;?
					b[i+1] == 'P' && (bytes.HasPrefix(body, []byte("$q")) || bytes.HasPrefix(body, []byte("+q"))) // DECRQSS, XTGETTCAP
				if !query {
					out = append(out, b[i:end]...)
				}
				i = end
				continue
			}
		case 'Z': // DECID
			i += 2
			continue
		}
		out = append(out, b[i])
		i++
	}
	return out
}

// csiQuery reports whether CSI params inter final asks the terminal for
// an answer: status and cursor reports (n, but not the > n setting),
// device attributes (c), mode queries ($p), XTVERSION (> q), the kitty
// keyboard query (? u), window reports (t), modifyOtherKeys query (> ... m
// with ?).
func csiQuery(params, inter []byte, final byte) bool {
	switch {
	case final == 'n':
		return !bytes.HasPrefix(params, []byte(">"))
	case final == 'c' && len(inter) == 0:
		return true
	case final == 'p' && bytes.Equal(inter, []byte("$")):
		return true
	case final == 'q' && bytes.HasPrefix(params, []byte(">")):
		return true
	case final == 'u' && bytes.Equal(params, []byte("?")):
		return true
	case final == 'm' && bytes.HasPrefix(params, []byte(">")) && bytes.HasSuffix(params, []byte("?")):
		return true
	case final == 't':
		return isWindowReport(params)
	}
	return false
}

// isWindowReport reports whether CSI params ... t asks for a report
// (window state, position, size: 11, 13, 14, 18, 19, 20, 21).
func isWindowReport(params []byte) bool {
	p, _, _ := bytes.Cut(params, []byte(";"))
	switch string(p) {
	case "11", "13", "14", "18", "19", "20", "21":
		return true
	}
	return false
}
