package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// jobInput is a job's input side: its stdin pipe or its terminal, and
// what is known of the terminal (size, bracketed paste, the unfinished
// line). Guarded by Job.mu, except wsem (a semaphore made with the job)
// and termLine (under wsem); isPTY is set before the run's readers
// start, and they read it without the lock.
type jobInput struct {
	// isPTY jobs run in their own session on a terminal: ptmx is its
	// master side (read for output, written for input). Pipe jobs spawned
	// with stdin have stdin, the write end of their stdin pipe.
	isPTY      bool
	ptmx       *os.File
	stdin      *os.File
	rows, cols uint16
	bracketed  bool

	// bpEdge holds the last bytes of the terminal's output (bpEdgeN of
	// them), for trackBracketedPasteLocked.
	bpEdge  [bpEdgeLen]byte
	bpEdgeN int

	// wsem serializes writes to the job's input (a semaphore, so that
	// waiting for it counts against the write's time bound).
	wsem chan struct{}

	// termLine is what the writes to a PTY job's terminal left of an
	// unfinished line (under wsem: see WriteInput).
	termLine int
}

// Write sends data to the job's stdin pipe or terminal, then (eof) closes
// stdin or sends the terminal's EOF character. A program that does not
// read gets WriteTimeout: the bytes written so far are reported.
func (j *Job) Write(data []byte, eof bool) (int, error) { return j.WriteInput(data, eof, false) }

// WriteInput is Write; typed marks input a person types at a terminal
// (attach), which the line-mode limit cuts as a terminal does rather than
// refuses.
func (j *Job) WriteInput(data []byte, eof, typed bool) (int, error) {
	// One write at a time, each bounded by writeTimeout in all: a write
	// waiting behind one to a job that does not read its input gives up
	// with it, rather than adding 2 s per writer in line.
	if j.Finished() {
		return 0, errorf(ErrFinished, "job %s has exited; nothing reads its input", j.id)
	}
	deadline := time.Now().Add(writeTimeout)
	wait := time.NewTimer(writeTimeout)
	select {
	case j.in.wsem <- struct{}{}:
		wait.Stop()
	case <-wait.C:
		return 0, errorf(ErrNoInput, "job %s is not reading its input: an earlier write to it was still waiting after %v (nothing of this one was written)", j.id, writeTimeout)
	}
	defer func() { <-j.in.wsem }()
	j.mu.Lock()
	state, f, isPTY := j.life.State, j.in.stdin, j.in.isPTY
	if isPTY {
		f = j.in.ptmx
	}
	j.mu.Unlock()
	if state == Exited {
		return 0, errorf(ErrFinished, "job %s has exited; nothing reads its input", j.id)
	}
	if state == Starting || state == Restarting {
		// (a service between runs: the last run's input is closed, the
		// next one's not open yet)
		return 0, errorf(ErrNotRunning, "job %s has no running process right now (%s); nothing reads its input", j.id, state)
	}
	if f == nil {
		if j.spec.Stdin {
			return 0, errorf(ErrNoInput, "job %s's stdin was closed (eof)", j.id)
		}
		return 0, errorf(ErrNoStdin, "job %s has no stdin: spawn it with stdin: true (or pty)", j.id)
	}
	lineMode := isPTY && termLineMode(f)
	line := 0 // the terminal's unfinished line after data (as far as writes tell)
	if isPTY {
		var n int
		n, line = longestLine(j.in.termLine, data)
		if lineMode && !typed && n > maxTermLine {
			// The terminal's line discipline keeps 4095 bytes of a line
			// and drops the rest: the program would get another line
			// than the one sent (a shell, another command).
			return 0, errorf(ErrInvalid,
				"job %s's terminal is in line mode, which keeps at most %d bytes of a line, and this write makes a line of %d (with what earlier writes left unfinished): nothing was written (send it in a file or to a job with stdin: true; a program that reads its terminal raw, as readline does, takes longer lines)", j.id, maxTermLine, n)
		}
	}
	_ = f.SetWriteDeadline(deadline)
	n, err := f.Write(data)
	if isPTY {
		j.in.termLine = line
		if n < len(data) {
			j.in.termLine = 0 // (unknown: do not refuse on a guess)
		}
	}
	if err == nil && eof {
		if isPTY {
			eofs := []byte{4} // VEOF, Ctrl-D
			if lineMode && j.in.termLine > 0 {
				// (in line mode the first one only hands over the
				// unfinished line; the second is the end of input)
				eofs = []byte{4, 4}
			}
			j.in.termLine = 0
			_, err = f.Write(eofs)
		} else {
			if err = f.Close(); errors.Is(err, os.ErrClosed) {
				err = nil // (the job ended meanwhile, and its stdin was closed for it)
			}
			j.mu.Lock()
			j.in.stdin = nil
			j.mu.Unlock()
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, errorf(ErrNoInput, "job %s is not reading its input: %d of %d bytes written in %v", j.id, n, len(data), writeTimeout)
		}
		if inputGone(err) {
			// (its reading end is closed: the job closed its stdin, or
			// its run is ending; a terminal whose processes are gone)
			return n, errorf(ErrNoInput, "job %s no longer reads its input (%d of %d bytes written): %v", j.id, n, len(data), err)
		}
		return n, fmt.Errorf("write to job %s: %w", j.id, err)
	}
	return n, nil
}

// maxTermLine is the longest line a terminal in line (canonical) mode
// keeps (N_TTY_BUF_SIZE less the newline).
const maxTermLine = 4095

// termLineMode reports whether the terminal of master f is in line
// (canonical) mode, as most programs that do not use readline leave it.
func termLineMode(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	canon := false
	_ = rc.Control(func(fd uintptr) {
		if t, err := unix.IoctlGetTermios(int(fd), unix.TCGETS); err == nil {
			canon = t.Lflag&unix.ICANON != 0
		}
	})
	return canon
}

// longestLine returns the length of the longest line data makes on a
// terminal whose unfinished line holds start bytes, and the unfinished
// line's length after it. A line ends at \n or \r (which the terminal
// turns into \n), and at Ctrl-C, Ctrl-D and Ctrl-U, which end or discard
// it.
func longestLine(start int, data []byte) (longest, after int) {
	cur := start
	longest = cur
	for _, b := range data {
		switch b {
		case '\n', '\r', 0x03, 0x04, 0x15:
			cur = 0
			continue
		}
		cur++
		longest = max(longest, cur)
	}
	return longest, cur
}

// inputGone reports whether err, from writing to a job's input or
// resizing its terminal, says that the other side is gone (a job that
// closed its stdin, a run ending): the client's request came too late,
// not a fault of the supervisor's.
func inputGone(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed) ||
		errors.Is(err, syscall.EBADF) || errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.ENXIO)
}

// writeTimeout bounds one write op to a job's input.
const writeTimeout = 2 * time.Second

// Resize changes a PTY job's terminal size; the kernel sends SIGWINCH to
// its foreground process group.
func (j *Job) Resize(rows, cols uint16) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.in.isPTY {
		return errorf(ErrNoInput, "job %s has no terminal (spawn it with pty)", j.id)
	}
	switch {
	case j.life.State == Exited:
		return errorf(ErrFinished, "job %s has exited", j.id)
	case j.life.State == Starting || j.life.State == Restarting || j.in.ptmx == nil:
		return errorf(ErrNotRunning, "job %s has no running process right now (%s)", j.id, j.life.State)
	}
	if err := setWinsize(j.in.ptmx, rows, cols); err != nil {
		if inputGone(err) {
			return errorf(ErrNotRunning, "job %s's terminal is closing (its run is ending): %v", j.id, err)
		}
		return fmt.Errorf("resize job %s: %w", j.id, err)
	}
	j.in.rows, j.in.cols = rows, cols
	return nil
}

// Terminal sequences that turn bracketed paste on and off.
var bpOn, bpOff = []byte("\x1b[?2004h"), []byte("\x1b[?2004l")

// bpEdgeLen is what a read keeps of its end to find a bracketed-paste
// sequence split between it and the next.
const bpEdgeLen = 7

// trackBracketedPasteLocked follows whether the program asked for
// bracketed paste, from its output p (one read), a sequence split between
// reads included (it was missed).
func (j *Job) trackBracketedPasteLocked(p []byte) {
	var edge [2 * bpEdgeLen]byte
	e := append(append(edge[:0], j.in.bpEdge[:j.in.bpEdgeN]...), p[:min(len(p), bpEdgeLen)]...)
	// (a sequence across the edge comes before any wholly in p)
	if on, off := bytes.LastIndex(e, bpOn), bytes.LastIndex(e, bpOff); on >= 0 || off >= 0 {
		j.in.bracketed = on > off
	}
	if on, off := bytes.LastIndex(p, bpOn), bytes.LastIndex(p, bpOff); on >= 0 || off >= 0 {
		j.in.bracketed = on > off
	}
	if len(p) >= bpEdgeLen {
		j.in.bpEdgeN = copy(j.in.bpEdge[:], p[len(p)-bpEdgeLen:])
	} else {
		all := append(append(edge[:0], j.in.bpEdge[:j.in.bpEdgeN]...), p...)
		j.in.bpEdgeN = copy(j.in.bpEdge[:], all[max(len(all)-bpEdgeLen, 0):])
	}
}
