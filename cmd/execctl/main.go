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
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/exec-supervisor/exec-supervisor/internal/buildinfo"
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
	// exitPartial: with several supervisors, some did not answer (or
	// failed) and the others' results were printed; stderr names each
	// host that did not (with --json, the error's "hosts").
	exitPartial = 6
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
	// curveServerKeyFile and curveKeyFile: CURVE on tcp (see connect).
	curveServerKeyFile, curveKeyFile string
	// endpointsFile: several supervisors (hosts.go), as --control and
	// --event take comma lists.
	endpointsFile  string
	flags          *pflag.FlagSet // (the global flags: see globalFlags)
	cmdFlags       *pflag.FlagSet // (the command's, once parsed: see changed)
	stdout, stderr io.Writer
	stdin          io.Reader
	// client is the one supervisor's Client (made by parse: see connect);
	// with several, nil, and pool their Pool, jobHosts the host (control
	// endpoint) of each job resolved or spawned (see on).
	client   *client.Client
	pool     *client.Pool
	jobHosts map[string]string
}

// command is one execctl subcommand.
type command interface {
	// Run executes the command; it returns the process exit code.
	Run(ctx context.Context, g *globals, args []string) (int, error)
	Synopsis() string
}

var commands = map[string]command{
	"spawn":        &SpawnCommand{},
	"poll":         &PollCommand{},
	"kill":         &KillCommand{},
	"status":       &StatusCommand{},
	"list":         &ListCommand{},
	"health":       &HealthCommand{},
	"logs":         &LogsCommand{},
	"remove":       &RemoveCommand{},
	"write":        &WriteCommand{},
	"send-keys":    &SendKeysCommand{},
	"resize":       &ResizeCommand{},
	"attach":       &AttachCommand{},
	"wait":         &WaitCommand{},
	"top":          &TopCommand{},
	"start":        &StartCommand{},
	"restart":      &RestartCommand{},
	"stop":         &StopCommand{},
	"history":      &HistoryCommand{},
	"completion":   &CompletionCommand{},
	"daemon":       &DaemonCommand{},
	"curve-keygen": &CurveKeygenCommand{},
}

var order = []string{"spawn", "wait", "poll", "logs", "write", "send-keys", "resize", "attach", "kill", "stop", "start", "restart", "history", "status", "list", "top", "remove", "health", "daemon", "curve-keygen", "completion"}

// usageError is a command-line mistake; Hint says how to do it right.
type usageError struct{ msg, hint string }

func (e *usageError) Error() string { return e.msg }

func usage(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintf(w, "usage: execctl [global flags] COMMAND [flags] [args]\n\ncommands:\n")
	for _, name := range order {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].Synopsis())
	}
	fmt.Fprintf(w, "\nJOB is a job's id, its name (spawn --name), or the start of its id (4 hex digits at least).\n")
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
		return g.usageFail("", args, err.Error()+unknownFlagHint(fs, err), "see: execctl --help")
	}
	if *version {
		fmt.Fprintf(stdout, "execctl %s (protocol %d)\n", buildinfo.Version, protocol.Version)
		return exitOK
	}
	rest := fs.Args()
	if len(rest) == 0 {
		if g.json {
			return g.usageFail("", nil, "no command given", "see: execctl --help")
		}
		usage(stderr, fs)
		return exitUsage
	}
	cmd, ok := commands[rest[0]]
	if !ok {
		msg := fmt.Sprintf("unknown command %q", rest[0])
		if s := suggest(rest[0], order); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		return g.usageFail("", rest[1:], msg, "see: execctl --help")
	}
	defer func() {
		if g.client != nil {
			g.client.Close()
		}
		if g.pool != nil {
			g.pool.Close()
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
