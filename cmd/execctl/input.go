package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// WriteCommand sends input to a job.
type WriteCommand struct{}

// Synopsis implements command.
func (*WriteCommand) Synopsis() string {
	return "send input to a job's stdin or terminal: write JOB DATA|- [--eof] [--no-newline]"
}

// Run implements command.
func (*WriteCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("write", g)
	eof := fs.Bool("eof", false, "then close stdin (pipe jobs) or send Ctrl-D (pty jobs)")
	raw := fs.BoolP("no-newline", "n", false, "do not append a newline (Enter, \\r, for a pty job) to DATA")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return 0, &usageError{msg: "want JOB and DATA (or - to read standard input)", hint: "execctl write JOB 'ls -l'   or   echo hi | execctl write JOB -"}
	}
	if fs.NArg() == 1 && !*eof {
		return 0, &usageError{msg: "nothing to write", hint: "give DATA, - for standard input, or --eof"}
	}
	id, err := g.resolveJob(ctx, fs.Arg(0))
	if err != nil {
		return 0, err
	}
	var data []byte
	switch {
	case fs.NArg() == 2 && fs.Arg(1) == "-":
		return writeStdin(ctx, g, id, *eof)
	case fs.NArg() == 2:
		data = []byte(fs.Arg(1))
		if !*raw {
			// Enter, as a terminal sends it, for a PTY job (a program
			// reading its terminal raw tells Ctrl-J from Enter); a line's
			// end for a pipe.
			nl := byte('\n')
			if st, err := g.on(id).Status(ctx, id); err == nil && st.Pty {
				nl = '\r'
			}
			data = append(data, nl)
		}
	}
	res, err := g.on(id).Write(ctx, id, data, *eof)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, res)
	}
	return exitOK, nil
}

// writeStdin sends standard input to job id in writes of at most
// protocol.MaxWriteBytes each, in order (one at a time), then eof with the
// last.
func writeStdin(ctx context.Context, g *globals, id string, eof bool) (int, error) {
	buf := make([]byte, protocol.MaxWriteBytes)
	var total int
	var last protocol.WriteResult
	for {
		n, rerr := io.ReadFull(g.stdin, buf)
		end := rerr == io.EOF || rerr == io.ErrUnexpectedEOF
		if rerr != nil && !end {
			return 0, fmt.Errorf("read standard input: %w", rerr)
		}
		if n > 0 || (end && eof) {
			res, err := g.on(id).Write(ctx, id, buf[:n], end && eof)
			if err != nil {
				if total > 0 {
					return 0, fmt.Errorf("after %d bytes written: %w", total, err)
				}
				return 0, err
			}
			total += res.Written
			last = res
		}
		if end {
			break
		}
	}
	if g.json {
		last.Written = total
		return exitOK, printJSON(g.stdout, last)
	}
	return exitOK, nil
}

// SendKeysCommand sends named keys to a PTY job.
type SendKeysCommand struct{}

// Synopsis implements command.
func (*SendKeysCommand) Synopsis() string {
	return "send keys to a pty job: send-keys JOB KEY... (Enter, Tab, Up, C-c, F1, ...)"
}

// Run implements command.
func (*SendKeysCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("send-keys", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() < 2 {
		return 0, &usageError{msg: "want JOB and at least one KEY", hint: "execctl send-keys JOB C-c   (keys: Enter Tab Shift-Tab Escape Up Down Left Right Home End PageUp PageDown Delete Backspace F1..F12 C-a..C-z C-\\ C-] ..., M-x or Alt-x, any single character)"}
	}
	var data []byte
	for _, k := range fs.Args()[1:] {
		b, err := client.KeyBytes(k)
		if err != nil {
			return 0, &usageError{msg: err.Error()}
		}
		data = append(data, b...)
	}
	id, err := g.resolveJob(ctx, fs.Arg(0))
	if err != nil {
		return 0, err
	}
	res, err := g.on(id).Write(ctx, id, data, false)
	if err != nil {
		return 0, err
	}
	if g.json { // (the write op's result, as execctl write prints it)
		return exitOK, printJSON(g.stdout, res)
	}
	return exitOK, nil
}

// ResizeCommand resizes a PTY job's terminal.
type ResizeCommand struct{}

// Synopsis implements command.
func (*ResizeCommand) Synopsis() string { return "resize a pty job's terminal: resize JOB ROWS COLS" }

// Run implements command.
func (*ResizeCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("resize", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() != 3 {
		return 0, &usageError{msg: "want JOB ROWS COLS", hint: "execctl resize JOB 40 120"}
	}
	// (strconv, not fmt.Sscan: "40abc" and "0x20" were taken)
	r, err := strconv.Atoi(fs.Arg(1))
	if err != nil || r < 1 || r > protocol.MaxTermSize {
		return 0, &usageError{msg: fmt.Sprintf("ROWS %q must be a number in 1..%d", fs.Arg(1), protocol.MaxTermSize)}
	}
	c, err := strconv.Atoi(fs.Arg(2))
	if err != nil || c < 1 || c > protocol.MaxTermSize {
		return 0, &usageError{msg: fmt.Sprintf("COLS %q must be a number in 1..%d", fs.Arg(2), protocol.MaxTermSize)}
	}
	id, err := g.resolveJob(ctx, fs.Arg(0))
	if err != nil {
		return 0, err
	}
	var res protocol.StatusResult // (the resize op's result: {job})
	if err := g.on(id).Call(ctx, protocol.OpResize, &protocol.ResizeArgs{JobID: id, Rows: r, Cols: c}, &res); err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, res)
	}
	return exitOK, nil
}

// crashGapNote explains a poll's crashGap: output may be missing here.
const crashGapNote = "output may be missing here: the supervisor crashed, and what it had read of this job since its last journal write is lost (how much is unknown)"
