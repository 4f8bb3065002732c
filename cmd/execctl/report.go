package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// cliError is an error as execctl reports it on stderr: "execctl CMD:
// message" and "  hint: ..." lines, or with --json one line
// {"error":{"code":...,"message":...,"hint":...,"exitCode":N,"command":...}}.
type cliError struct {
	// Code is the supervisor's error code (pkg/protocol: not-found,
	// invalid-argument, ...) or one of execctl's own (code* below).
	Code     string `json:"code"`
	Message  string `json:"message"`
	Hint     string `json:"hint,omitempty"`
	ExitCode int    `json:"exitCode"`
	Command  string `json:"command,omitempty"`
	// Host is the supervisor the error is of (its control endpoint), with
	// several; Hosts are the errors of several (code partial).
	Host  string      `json:"host,omitempty"`
	Hosts []hostError `json:"hosts,omitempty"`
	wire  bool        // (Code is the supervisor's: the text names it)
}

// execctl's own error codes (exit code in parentheses).
const (
	codeUsage       = "usage"       // a command-line mistake (2)
	codeUnreachable = "unreachable" // no supervisor answered, or it refused us (3)
	codeFailed      = "failed"      // anything else that went wrong here (1)
	codeOutputLost  = "output-lost" // a follow could not show all the output (5)
	codeInterrupted = "interrupted" // Ctrl-C while spawn waited (130)
	codePartial     = "partial"     // with several supervisors, some did not answer (6)
)

// fail reports e on stderr and returns its exit code.
func (g *globals) fail(e cliError) int {
	if g.json {
		_ = printJSON(g.stderr, struct {
			Error cliError `json:"error"`
		}{e})
		return e.ExitCode
	}
	prefix, msg := "execctl", e.Message
	if e.Command != "" {
		prefix += " " + e.Command
	}
	if e.wire {
		msg += " (" + e.Code + ")"
	}
	fmt.Fprintf(g.stderr, "%s: %s\n", prefix, msg)
	if e.Hint != "" {
		fmt.Fprintf(g.stderr, "  hint: %s\n", e.Hint)
	}
	return e.ExitCode
}

// usageFail reports a command-line mistake in args, as JSON if --json is
// among them (it may not have been parsed: the mistake came first).
func (g *globals) usageFail(name string, args []string, msg, hint string) int {
	g.json = g.json || jsonAmong(args)
	return g.fail(cliError{Code: codeUsage, Message: msg, Hint: hint, ExitCode: exitUsage, Command: name})
}

// jsonAmong reports whether args set --json (before any "--").
func jsonAmong(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--json"); ok && (v == "" || v[0] == '=') {
			b, err := strconv.ParseBool(strings.TrimPrefix(v, "="))
			on = v == "" || err == nil && b
		}
	}
	return on
}

// report prints err with what to do about it and returns the exit code.
func report(g *globals, name string, err error) int {
	if errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	var me *client.MemberError
	var pe *client.PartialError
	if g.pool != nil && !errors.As(err, &me) && !errors.As(err, &pe) && len(g.jobHosts) > 0 {
		// (a command on jobs of one host: the error names it)
		hosts := map[string]bool{}
		for _, h := range g.jobHosts {
			hosts[h] = true
		}
		if len(hosts) == 1 {
			for h := range hosts {
				err = &client.MemberError{Member: h, Err: err}
			}
		}
	}
	return g.fail(explain(g, name, err))
}

// explain says what err (of command name) means and what to do about it.
func explain(g *globals, name string, err error) cliError {
	var me *client.MemberError
	var pe *client.PartialError
	var ue *usageError
	switch {
	case g.pool == nil:
	case errors.As(err, &ue):
	case errors.As(err, &pe):
		// (a job looked for on every host, some of which did not answer)
		return cliError{Code: codeUnreachable, Message: err.Error(), ExitCode: exitUnreachable, Command: name,
			Hint: "a host that did not answer may hold it: see execctl health"}
	case errors.As(err, &me):
		e := explainAt(g, name, me.Err, me.Member, g.eventOf(me.Member))
		e.Host, e.Message = me.Member, "host "+hostName(me.Member)+": "+e.Message
		return e
	}
	var ctl, evt string
	if g.client != nil {
		ctl, evt = g.client.Options().ControlAddress, g.client.Options().EventAddress
	}
	return explainAt(g, name, err, ctl, evt)
}

// eventOf returns the event endpoint of the host of control endpoint ctl.
func (g *globals) eventOf(ctl string) string {
	for _, m := range g.pool.Members() {
		if m.Member == ctl {
			return m.Event
		}
	}
	return ""
}

// explainAt is explain of err from the supervisor at endpoints ctl, evt.
func explainAt(g *globals, name string, err error, ctl, evt string) cliError {
	var ue *usageError
	var ce *client.ConnectError
	var pe *protocol.Error
	var me *zmtp.MechanismError
	var re *zmtp.RefusedError
	var upe *statedir.UnsafePathError
	e := cliError{Code: codeUnreachable, Message: err.Error(), ExitCode: exitUnreachable, Command: name}
	const tokenHint = "pass the supervisor's token with --token-file PATH or EXEC_SUPERVISOR_TOKEN (its path is in the supervisor's startup log)"
	switch {
	case errors.As(err, &ue):
		e.Code, e.Message, e.Hint, e.ExitCode = codeUsage, ue.msg, ue.hint, exitUsage
	case errors.As(err, &me) && me.Server == "PLAIN":
		e.Message, e.Hint = fmt.Sprintf("the supervisor at %s requires a token (ZMTP PLAIN) and execctl has none", ctl), tokenHint
	case errors.As(err, &me) && me.Server == "NULL":
		e.Message = fmt.Sprintf("the supervisor at %s runs without authentication, but execctl was given a token", ctl)
		e.Hint = "drop --token-file / EXEC_SUPERVISOR_TOKEN for this supervisor, or make sure it is the one you mean (it was started with --insecure-tcp-no-auth)"
	case errors.As(err, &me):
	case errors.As(err, &ce) && errors.As(err, &re) && re.Reason == zmtp.AuthFailed:
		e.Message, e.Hint = "the supervisor refused our token (authentication failed)", tokenHint
	case errors.As(err, &ce) && errors.As(err, &re) && strings.HasPrefix(re.Reason, zmtp.TooManyConnections):
		e.Hint = "the supervisor is running but at its connection limit (exec-supervisor --max-connections), with no idle connection to give up: a client may be holding many connections open; exec_supervisor_connections_rejected_total{reason=\"too-many-connections\"} counts refusals"
	case errors.As(err, &ce) && !ce.Lost && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)):
		// Something accepted the connection and closed it at once: a
		// supervisor that is running but refusing (its connection limit,
		// or a peer it does not accept).
		e.Hint = fmt.Sprintf("a supervisor is listening at %s but closed the connection at once: it may be at its connection limit (exec-supervisor --max-connections), or not accept this user (--allow-uid); its log says why (\"connection rejected\")", ctl)
	case errors.As(err, &ce) && isTimeout(err), errors.Is(err, context.DeadlineExceeded):
		// Something is listening (a connection was made, or a request
		// went out) but did not answer in time.
		e.Hint = fmt.Sprintf("the supervisor at %s did not answer in time: it may be stopped (SIGSTOP), hung or overloaded; check its process and log (starting another would find its state directory in use); a slow one may need a longer --request-timeout", ctl)
	case errors.As(err, &ce) && errors.Is(err, syscall.EACCES):
		// The socket (or its directory) is there and not ours to use: a
		// supervisor of another user, or not opened to us.
		e.Hint = fmt.Sprintf("a supervisor's socket is there but not open to this user (uid %d): its owner can let you in with exec-supervisor --allow-uid %d (or --allow-gid); or use your own supervisor with --control/--event",
			os.Geteuid(), os.Geteuid())
	case errors.As(err, &ce) && errors.As(err, &upe):
		// (a directory on the way that is not safe: see statedir.CheckPeer)
		e.Hint = "execctl will not talk through a socket directory another user controls (they could stand in for the supervisor): remove or fix that directory, or point --control/--event at a supervisor's private directory (default: $XDG_RUNTIME_DIR/exec-supervisor)"
	case errors.As(err, &ce):
		e.Hint = fmt.Sprintf("is the supervisor running? start one with: exec-supervisor --control %s --event %s", ctl, evt)
	case errors.As(err, &pe):
		e.Code, e.Message, e.Hint, e.ExitCode, e.wire = string(pe.Code), pe.Message, hintFor(name, pe), exitFailed, true
		if pe.Code == protocol.CodeNotFound {
			e.ExitCode = exitNotFound
		}
	case errors.Is(err, client.ErrMemberDown):
		// (one of several: its health check failed, without a connection
		// error of its own to tell)
		e.Hint = "its health check did not answer, or said not ok (draining?): execctl health shows every host"
	default:
		e.Code, e.ExitCode = codeFailed, exitFailed
	}
	return e
}

func hintFor(name string, pe *protocol.Error) string {
	c := pe.Code
	switch {
	case (name == "write" || name == "send-keys") && pe.Details["reason"] == "no-stdin":
		return "spawn the job with --stdin (or --pty) to write to it"
	case name == "spawn" && pe.Details["field"] == "pty":
		return "--rows and --cols must be 1..10000"
	case name == "remove" && pe.Details["reason"] == "ambiguous-name":
		return "remove one by its id (execctl logs ID shows its output)"
	}
	switch c {
	case protocol.CodeNotFound:
		return "list known jobs with: execctl list"
	case protocol.CodeAlreadyExists:
		return "a job with that id is known: choose another id, or forget the finished one with: execctl remove JOB"
	case protocol.CodeNameTaken:
		if id := pe.Details["jobId"]; id != "" {
			return "job " + id + " has that name (or id): choose another name; a name is free again once its job has finished (execctl status " + id + ")"
		}
		return "a job holds that name until it finishes: choose another name"
	case protocol.CodeTooManyJobs:
		if name == "spawn" {
			return "see running jobs with: execctl list; wait for a slot with spawn --queue; raise the limit with exec-supervisor --max-jobs"
		}
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
