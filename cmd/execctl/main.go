// Command execctl is the operator CLI of exec-supervisor: spawn, follow,
// poll, kill and inspect jobs. All socket I/O goes through pkg/client.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/exec-supervisor/exec-supervisor/internal/buildinfo"
	"github.com/exec-supervisor/exec-supervisor/internal/zmqx"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Exit codes of execctl (with --wait/--follow, the job's own code instead).
const (
	exitOK          = 0
	exitFailed      = 1 // the supervisor answered with an error
	exitUsage       = 2
	exitUnreachable = 3
	exitNotFound    = 4 // no such job
	// exitOutputLost: a follow (spawn --follow, logs -f) whose job(s)
	// succeeded but could not show all of their output (it was no longer
	// retained when this client got to it); stderr says which part.
	exitOutputLost = 5
	// exitInterrupted: Ctrl-C while following or waiting (the jobs go on).
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal, a second one ends execctl at once (its
	// connections close, which also ends any pace it held), should the
	// first not get it out: stuck writing to a stopped pipe, say.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// globals are the global flags (before or after the command) and what
// every command uses.
type globals struct {
	control, event string
	json           bool
	timeout        time.Duration
	tokenFile      string
	flags          *pflag.FlagSet // (the global flags: see globalFlags)
	stdout, stderr io.Writer
	stdin          io.Reader
	client         *client.Client // (made by parse: see connect)
}

// command is one execctl subcommand.
type command interface {
	// Run executes the command; it returns the process exit code.
	Run(ctx context.Context, g *globals, args []string) (int, error)
	Synopsis() string
}

var commands = map[string]command{
	"spawn":      &SpawnCommand{},
	"poll":       &PollCommand{},
	"kill":       &KillCommand{},
	"status":     &StatusCommand{},
	"list":       &ListCommand{},
	"health":     &HealthCommand{},
	"logs":       &LogsCommand{},
	"remove":     &RemoveCommand{},
	"write":      &WriteCommand{},
	"send-keys":  &SendKeysCommand{},
	"resize":     &ResizeCommand{},
	"attach":     &AttachCommand{},
	"wait":       &WaitCommand{},
	"top":        &TopCommand{},
	"start":      &StartCommand{},
	"restart":    &RestartCommand{},
	"stop":       &StopCommand{},
	"history":    &HistoryCommand{},
	"completion": &CompletionCommand{},
}

var order = []string{"spawn", "wait", "poll", "logs", "write", "send-keys", "resize", "attach", "kill", "stop", "start", "restart", "history", "status", "list", "top", "remove", "health", "completion"}

// usageError is a command-line mistake; Hint says how to do it right.
type usageError struct{ msg, hint string }

func (e *usageError) Error() string { return e.msg }

func usage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "usage: execctl [global flags] COMMAND [flags] [args]\n\ncommands:\n")
	for _, name := range order {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].Synopsis())
	}
	fmt.Fprintf(w, "\nglobal flags (before or after the command):\n%s\nRun 'execctl COMMAND --help' for a command's flags.\n", fs.FlagUsages())
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runIO(ctx, args, os.Stdin, stdout, stderr)
}

// runIO is run with its standard input given (tests: a terminal).
func runIO(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr, stdin: stdin}
	fs := g.globalFlags()
	version := fs.Bool("version", false, "print execctl's version and exit")
	fs.Usage = func() { usage(stderr, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		// (pflag prints nothing itself with ContinueOnError)
		fmt.Fprintf(stderr, "execctl: %v%s\n  hint: see: execctl --help\n", err, unknownFlagHint(fs, err))
		return exitUsage
	}
	if *version {
		fmt.Fprintf(stdout, "execctl %s (protocol %d)\n", buildinfo.Version, protocol.Version)
		return exitOK
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(stderr, fs)
		return exitUsage
	}
	cmd, ok := commands[rest[0]]
	if !ok {
		msg := fmt.Sprintf("unknown command %q", rest[0])
		if s := suggest(rest[0], order); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		fmt.Fprintf(stderr, "execctl: %s\n  hint: see: execctl --help\n", msg)
		return exitUsage
	}
	defer func() {
		if g.client != nil {
			g.client.Close()
		}
	}()
	code, err := cmd.Run(ctx, g, rest[1:])
	if err != nil {
		return report(g, rest[0], err)
	}
	return code
}

// isTimeout says whether err is a network timeout (an i/o deadline that
// ran out), not a refusal.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// report prints err with what to do about it and returns the exit code.
func report(g *globals, name string, err error) int {
	var ue *usageError
	var ce *client.ConnectError
	var pe *protocol.Error
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(g.stderr, "execctl %s: %s\n", name, ue.msg)
		if ue.hint != "" {
			fmt.Fprintf(g.stderr, "  hint: %s\n", ue.hint)
		}
		return exitUsage
	case errors.As(err, &ce) && strings.Contains(err.Error(), "mechanism PLAIN"):
		fmt.Fprintf(g.stderr, "execctl %s: the supervisor wants a token (ZMTP PLAIN) and execctl has none\n  hint: pass the supervisor's token with --token-file PATH or EXEC_SUPERVISOR_TOKEN (its path is in the supervisor's startup log)\n", name)
		return exitUnreachable
	case errors.As(err, &ce) && strings.Contains(err.Error(), "authentication failed"):
		fmt.Fprintf(g.stderr, "execctl %s: the supervisor refused our token (authentication failed)\n  hint: pass the supervisor's token with --token-file PATH or EXEC_SUPERVISOR_TOKEN (its path is in the supervisor's startup log)\n", name)
		return exitUnreachable
	case errors.As(err, &ce) && strings.Contains(err.Error(), zmqx.TooManyConnections):
		fmt.Fprintf(g.stderr, "execctl %s: %v\n  hint: the supervisor is running but at its connection limit (exec-supervisor --max-connections), with no idle connection to give up: a client may be holding many connections open; exec_supervisor_connections_rejected_total{reason=\"too-many-connections\"} counts refusals\n", name, err)
		return exitUnreachable
	case errors.As(err, &ce) && !ce.Lost && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)):
		// Something accepted the connection and closed it at once: a
		// supervisor that is running but refusing (its connection limit,
		// or a peer it does not accept).
		fmt.Fprintf(g.stderr, "execctl %s: %v\n  hint: a supervisor is listening at %s but closed the connection at once: it may be at its connection limit (exec-supervisor --max-connections), or not accept this user (--allow-uid); its log says why (\"connection rejected\")\n",
			name, err, g.client.Options().ControlAddress)
		return exitUnreachable
	case errors.As(err, &ce) && isTimeout(err), errors.Is(err, context.DeadlineExceeded):
		// Something is listening (a connection was made, or a request
		// went out) but did not answer in time.
		fmt.Fprintf(g.stderr, "execctl %s: %v\n  hint: the supervisor at %s did not answer in time: it may be stopped (SIGSTOP), hung or overloaded; check its process and log (starting another would find its state directory in use); a slow one may need a longer --request-timeout\n",
			name, err, g.client.Options().ControlAddress)
		return exitUnreachable
	case errors.As(err, &ce) && errors.Is(err, syscall.EACCES):
		// The socket (or its directory) is there and not ours to use: a
		// supervisor of another user, or not opened to us.
		fmt.Fprintf(g.stderr, "execctl %s: %v\n  hint: a supervisor's socket is there but not open to this user (uid %d): its owner can let you in with exec-supervisor --allow-uid %d (or --allow-gid); or use your own supervisor with --control/--event\n",
			name, err, os.Geteuid(), os.Geteuid())
		return exitUnreachable
	case errors.As(err, &ce) && strings.Contains(err.Error(), "refusing to"):
		// (a directory on the way that is not safe: see zmqx.CheckPeerDir)
		fmt.Fprintf(g.stderr, "execctl %s: %v\n  hint: execctl will not talk through a socket directory another user controls (they could stand in for the supervisor): remove or fix that directory, or point --control/--event at a supervisor's private directory (default: $XDG_RUNTIME_DIR/exec-supervisor)\n",
			name, err)
		return exitUnreachable
	case errors.As(err, &ce):
		addr := g.client.Options().ControlAddress
		fmt.Fprintf(g.stderr, "execctl %s: %v\n  hint: is the supervisor running? start one with: exec-supervisor --control %s --event %s\n",
			name, err, addr, g.client.Options().EventAddress)
		return exitUnreachable
	case errors.As(err, &pe):
		fmt.Fprintf(g.stderr, "execctl %s: %s (%s)\n", name, pe.Message, pe.Code)
		if h := hintFor(name, pe.Code, pe.Message); h != "" {
			fmt.Fprintf(g.stderr, "  hint: %s\n", h)
		}
		if pe.Code == protocol.CodeNotFound {
			return exitNotFound
		}
		return exitFailed
	}
	fmt.Fprintf(g.stderr, "execctl %s: %v\n", name, err)
	return exitFailed
}

func hintFor(name string, c protocol.Code, msg string) string {
	switch {
	case (name == "write" || name == "send-keys") && strings.Contains(msg, "stdin: true"):
		return "spawn the job with --stdin (or --pty) to write to it"
	case name == "spawn" && strings.Contains(msg, "pty.rows and pty.cols"):
		return "--rows and --cols must be 1..10000"
	}
	switch c {
	case protocol.CodeNotFound:
		return "list known jobs with: execctl list"
	case protocol.CodeTooManyJobs:
		return "see running jobs with: execctl list; raise the limit with exec-supervisor --max-jobs"
	case protocol.CodeJobRunning:
		if name == "start" || name == "restart" {
			return "" // the message says when to try again
		}
		return "kill it first with: execctl kill JOB"
	case protocol.CodeUnsupportedVersion:
		return "execctl and exec-supervisor come from different releases"
	}
	return ""
}
