package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
)

// Global flags go before the command or after it (among the command's
// own flags, up to "--" or, for spawn, the job's command): each command's
// flag set takes them too, hidden, sharing their values (see parse). A
// command flag of the same name wins after the command.

// globalFlags defines execctl's global flags on a new flag set, bound to
// g's fields.
func (g *globals) globalFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("execctl", pflag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.SetInterspersed(false) // (the first argument that is not a flag is the command)
	fs.StringVar(&g.control, "control", envOr("EXEC_SUPERVISOR_CONTROL", ""), "control endpoint (default: the private ipc socket; env EXEC_SUPERVISOR_CONTROL); several supervisors: a comma list, --event's in the same order")
	fs.StringVar(&g.event, "event", envOr("EXEC_SUPERVISOR_EVENT", ""), "event endpoint (default: the private ipc socket; env EXEC_SUPERVISOR_EVENT); several: a comma list")
	fs.StringVar(&g.endpointsFile, "endpoints-file", envOr("EXEC_SUPERVISOR_ENDPOINTS_FILE", ""), "several supervisors: a file of them, a line each: CONTROL EVENT (env EXEC_SUPERVISOR_ENDPOINTS_FILE)")
	fs.BoolVar(&g.json, "json", false, "print JSON objects with the wire protocol's field names")
	fs.DurationVar(&g.timeout, "request-timeout", 10*time.Second, "timeout of each request to the supervisor")
	fs.StringVar(&g.tokenFile, "token-file", envOr("EXEC_SUPERVISOR_TOKEN_FILE", ""), "token for tcp endpoints (default: env EXEC_SUPERVISOR_TOKEN, else the supervisor's default token file)")
	fs.StringVar(&g.curveServerKeyFile, "curve-server-key-file", envOr("EXEC_SUPERVISOR_CURVE_SERVER_KEY_FILE", ""), "CURVE on tcp: the supervisor's public key file (its curve.pub; or env EXEC_SUPERVISOR_CURVE_SERVER_KEY, the key itself)")
	fs.StringVar(&g.curveKeyFile, "curve-key-file", envOr("EXEC_SUPERVISOR_CURVE_KEY_FILE", ""), "CURVE on tcp: our secret key file (Z85, 0600; or env EXEC_SUPERVISOR_CURVE_SECRET_KEY, the key itself)")
	g.flags = fs
	return fs
}

// addGlobals lets fs (a command's flags) take the global flags too,
// unless it has a flag of that name itself.
func (g *globals) addGlobals(fs *pflag.FlagSet) {
	if g.flags == nil {
		return
	}
	g.flags.VisitAll(func(f *pflag.Flag) {
		if f.Name == "version" || fs.Lookup(f.Name) != nil {
			return
		}
		c := *f // (the same Value: setting it here sets the global)
		c.Hidden = true
		fs.AddFlag(&c)
	})
}

// parse parses a command's flags (and the global flags among them), then
// makes g's client: every command calls it before asking the supervisor.
func (g *globals) parse(fs *pflag.FlagSet, args []string) error {
	g.addGlobals(fs)
	g.cmdFlags = fs
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		g.json = g.json || jsonAmong(args) // (for the error: --json may come after the mistake)
		return &usageError{msg: err.Error() + unknownFlagHint(fs, err), hint: "see: " + fs.Name() + " --help"}
	}
	return g.connect()
}

// connect checks the global flags and makes g's client, or with several
// supervisors its pool (once).
func (g *globals) connect() error {
	if g.client != nil || g.pool != nil {
		return nil
	}
	hosts, err := g.hosts()
	if err != nil {
		return err
	}
	if g.timeout <= 0 {
		return &usageError{msg: fmt.Sprintf("--request-timeout %v must be positive", g.timeout)}
	}
	token := os.Getenv("EXEC_SUPERVISOR_TOKEN")
	if g.tokenFile != "" {
		t, err := statedir.ReadToken(g.tokenFile)
		if err != nil {
			return &usageError{msg: fmt.Sprintf("--token-file: %v", err)}
		}
		token = t
	}
	// A key file given (flag, or its env) wins over a key in the env.
	curveServer, curveSecret := os.Getenv("EXEC_SUPERVISOR_CURVE_SERVER_KEY"), os.Getenv("EXEC_SUPERVISOR_CURVE_SECRET_KEY")
	if g.curveServerKeyFile != "" {
		curveServer = ""
	}
	if g.curveKeyFile != "" {
		curveSecret = ""
	}
	opts := client.Options{
		ControlAddress: hosts.members[0].Control, EventAddress: hosts.members[0].Event, RequestTimeout: g.timeout,
		MaxReconnectAttempts: 1, DialTimeout: 2 * time.Second, Token: token,
		CurveServerKey: curveServer, CurveServerKeyFile: g.curveServerKeyFile,
		CurveSecretKey: curveSecret, CurveKeyFile: g.curveKeyFile,
		LocalPollJobs: -1, // (one-shot commands: a poll asks the supervisor)
	}
	if !hosts.multi {
		g.client = client.New(opts)
		return nil
	}
	g.pool, err = client.NewPool(client.PoolOptions{Members: hosts.members, Client: opts})
	return err
}
