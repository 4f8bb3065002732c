package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// PollCommand prints retained output.
type PollCommand struct{}

// Synopsis implements command.
func (*PollCommand) Synopsis() string { return "print a job's retained output: poll JOB [--cursor N]" }

// Run implements command.
func (*PollCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("poll", g)
	cursor := fs.Int64("cursor", 0, "byte offset into the job's combined output to start from")
	maxB := fs.Int64("max-bytes", 0, "most bytes to fetch (default: the protocol maximum)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if *cursor < 0 || *maxB < 0 {
		return 0, &usageError{msg: "--cursor and --max-bytes must not be negative", hint: "a cursor is a byte offset, from 0 (the next one is printed after each poll)"}
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	res, err := g.on(id).Poll(ctx, id, *cursor, *maxB)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, res)
	}
	if res.LostBytes > 0 {
		fmt.Fprintf(g.stderr, "execctl: %d bytes before offset %d are no longer retained\n", res.LostBytes, res.Job.RetainedFrom)
	}
	if res.CrashGap {
		fmt.Fprintf(g.stderr, "execctl: %s\n", crashGapNote)
	}
	for _, c := range res.Chunks {
		w := g.stdout
		if c.Stream == protocol.Stderr {
			w = g.stderr
		}
		_, _ = w.Write(c.Data)
	}
	if res.More {
		fmt.Fprintf(g.stderr, "execctl: more output follows; continue with --cursor %d\n", res.Next)
	}
	return exitOK, nil
}

// LogsCommand prints or follows the output of one or more jobs.
type LogsCommand struct{}

// Synopsis implements command.
func (*LogsCommand) Synopsis() string {
	return "print output of jobs, prefixed by job id: logs [-f] JOB..."
}

// Run implements command.
func (*LogsCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("logs", g)
	follow := fs.BoolP("follow", "f", false, "keep streaming until every job ended")
	pace := fs.Bool("pace", false, "with -f: hold the jobs to this follower's pace, so that none of their output is lost to the ring buffer (they wait for it; a follower that stops reading is let go after the supervisor's --pace-stall-limit, 2m by default)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return 0, &usageError{msg: "want at least one JOB", hint: "execctl logs -f JOB1 JOB2"}
	}
	if *pace && !*follow {
		return 0, &usageError{msg: "--pace is for -f"}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	color := useColor(g.stdout)
	ids, unreached, err := g.resolveToShow(ctx, fs.Args())
	if err != nil {
		return 0, err
	}
	// Each job once, and every one of them known before any is shown.
	seen := map[string]bool{}
	ids = slices.DeleteFunc(ids, func(id string) bool {
		dup := seen[id]
		seen[id] = true
		return dup
	})
	errs := make([]error, len(ids))
	// A job no longer in memory whose output the supervisor still has in
	// its files (spawned with --output disk) is printed from them, and
	// with -f replayed from them to its end, as a job in memory that
	// ended is.
	for k, id := range ids {
		// (a supervisor not answering now is waited for by the follow,
		// which rides out a restart)
		var ce *client.ConnectError
		if _, err := g.on(id).Status(ctx, id); err != nil && !errors.As(err, &ce) {
			if protocol.CodeOf(err) == protocol.CodeNotFound {
				if res, perr := g.on(id).Poll(ctx, id, 0, 1); perr == nil {
					ids[k] = res.Job.JobID // (a name: the id of the job on disk that has it)
					continue
				}
			}
			return 0, g.hostErr(id, err)
		}
	}
	var lost atomic.Bool
	for i, id := range ids {
		wg.Add(1)
		show := func() {
			defer wg.Done()
			prefix := id + " | "
			if color {
				// One color per job, only for a terminal (see useColor).
				prefix = fmt.Sprintf("\x1b[%dm%s\x1b[0m | ", 31+i%6, id)
			}
			lw := &lineWriter{prefix: prefix, mu: &mu}
			if !*follow {
				for cursor := int64(0); ; {
					res, err := g.on(id).Poll(ctx, id, cursor, 0)
					if err != nil {
						errs[i] = err
						return
					}
					if res.LostBytes > 0 && cursor == 0 {
						fmt.Fprintf(g.stderr, "execctl: [the first %s of %s's output are no longer retained]\n", humanBytes(res.LostBytes), id)
					} else if res.LostBytes > 0 {
						fmt.Fprintf(g.stderr, "execctl: [%s of %s's output are no longer retained here]\n", humanBytes(res.LostBytes), id)
					}
					if res.CrashGap {
						lw.flush(g.stdout)
						fmt.Fprintf(g.stderr, "execctl: [%s: %s]\n", id, crashGapNote)
					}
					for _, c := range res.Chunks {
						if g.json {
							mu.Lock()
							_ = printJSON(g.stdout, jsonChunk{JobID: id, Chunk: c, Host: g.hostOf(id)})
							mu.Unlock()
						} else {
							lw.write(g.stdout, c.Data)
						}
					}
					if !res.More {
						break
					}
					cursor = res.Next
				}
				lw.flush(g.stdout)
				return
			}
			errs[i] = followPeriods(ctx, g, id, *pace, func(ev protocol.Event) error {
				if lostOutput(ev) {
					lost.Store(true)
				}
				if g.json {
					mu.Lock()
					defer mu.Unlock()
					return printJSON(g.stdout, g.eventJSON(ev))
				}
				if lostOutput(ev) {
					lw.flush(g.stdout)
					gapNotice(g, id, ev)
				}
				if ev.Kind == protocol.KindStdout || ev.Kind == protocol.KindStderr {
					var p protocol.OutputPayload
					if err := ev.DecodePayload(&p); err != nil {
						return err
					}
					lw.write(g.stdout, p.Data)
				}
				if ev.Kind == protocol.KindRestarting {
					lw.flush(g.stdout)
					var p protocol.RestartingPayload
					_ = ev.DecodePayload(&p)
					mu.Lock()
					fmt.Fprintf(g.stdout, "%s[run %d ended: %s; restarting in %s]\n", lw.prefix, p.Attempt, runEnd(p.Reason, p.ExitCode, p.Signal), humanDuration(msDuration(p.DelayMs)))
					mu.Unlock()
				}
				if ev.Kind.Terminal() {
					lw.flush(g.stdout)
					var p protocol.ExitPayload
					_ = ev.DecodePayload(&p)
					mu.Lock()
					fmt.Fprintf(g.stdout, "%s[ended: %s]\n", lw.prefix, runEnd(p.Reason, p.ExitCode, p.Signal))
					mu.Unlock()
				}
				return nil
			})
		}
		if *follow {
			go show() // (jobs followed at once, interleaved)
		} else {
			show() // (one job after the other, in the order given)
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return exitInterrupted, nil // (Ctrl-C: the way to stop following)
	}
	for i, err := range errs {
		errs[i] = g.hostErr(ids[i], err)
	}
	if g.pool != nil && (len(unreached) > 0 || slices.ContainsFunc(errs, isHostDown)) {
		all := append(unreached, errs...)
		failed := len(slices.DeleteFunc(slices.Clone(all), func(err error) bool { return err == nil }))
		return g.failures("logs", all, len(all), fmt.Sprintf("%d of %d jobs could not be shown (whole): see above; the others' output is shown", failed, len(all))), nil
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return logsLostExit(g, lost.Load()), nil
}

// jsonChunk is a chunk of output as logs --json prints it: the wire's
// fields, and whose it is.
type jsonChunk struct {
	JobID string `json:"jobId"`
	protocol.Chunk
	Host string `json:"host,omitempty"` // (with several supervisors)
}

// followPeriods follows a job from its first event like client.Follow,
// and on past a terminal event when the job went on after it: a service
// started again once its supervision ended has several in its sequence.
func followPeriods(ctx context.Context, g *globals, id string, paced bool, fn client.FollowFunc) error {
	from := uint64(1)
	for {
		var end uint64
		err := followOn(ctx, g, id, &from, paced, func(ev protocol.Event) error {
			if ev.Kind.Terminal() {
				end = ev.Seq
			}
			return fn(ev)
		})
		if err != nil || end == 0 {
			return err
		}
		info, err := g.on(id).Status(ctx, id)
		if protocol.CodeOf(err) == protocol.CodeNotFound {
			return nil // (it left memory since: it cannot go on)
		}
		if err != nil {
			return err
		}
		if info.Finished() && info.LastSeq <= end {
			return nil
		}
		from = end + 1
	}
}

// lineWriter prefixes whole lines so interleaved jobs stay readable.
type lineWriter struct {
	prefix string
	buf    []byte
	mu     *sync.Mutex
}

func (l *lineWriter) write(w io.Writer, p []byte) {
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			return
		}
		l.mu.Lock()
		fmt.Fprintf(w, "%s%s\n", l.prefix, l.buf[:i])
		l.mu.Unlock()
		l.buf = l.buf[i+1:]
	}
}

func (l *lineWriter) flush(w io.Writer) {
	if len(l.buf) > 0 {
		l.mu.Lock()
		fmt.Fprintf(w, "%s%s\n", l.prefix, l.buf)
		l.mu.Unlock()
		l.buf = nil
	}
}
