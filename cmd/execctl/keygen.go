package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
)

// CurveKeygenCommand makes a CURVE key pair in files.
type CurveKeygenCommand struct{}

// Synopsis implements command.
func (*CurveKeygenCommand) Synopsis() string {
	return "make a CURVE key pair: curve-keygen FILE.key (writes FILE.key 0600 and FILE.pub; prints the public key)"
}

// Run implements command.
func (*CurveKeygenCommand) Run(_ context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("curve-keygen", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() != 1 || fs.Arg(0) == "" {
		return 0, &usageError{msg: "want one FILE", hint: "execctl curve-keygen ~/.config/exec-supervisor/client.key"}
	}
	path := fs.Arg(0)
	if !strings.HasSuffix(path, ".key") {
		return 0, &usageError{msg: fmt.Sprintf("%s: the secret key file's name must end in .key (its public key goes beside it as .pub)", path)}
	}
	// Never a key over an existing one: a client or supervisor may hold it.
	for _, p := range []string{path, zmtp.CurvePublicPath(path)} {
		if _, err := os.Lstat(p); err == nil {
			return 0, fmt.Errorf("%s exists: remove it first to replace the key pair (whoever pinned or admitted the old public key must be given the new one)", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
	}
	kp, _, err := zmtp.LoadOrCreateCurveKey(path)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, map[string]string{"publicKey": kp.Public.String(), "secretKeyFile": path, "publicKeyFile": zmtp.CurvePublicPath(path)})
	}
	fmt.Fprintf(g.stdout, "%s\n", kp.Public)
	fmt.Fprintf(g.stderr, "secret key in %s (0600), public key in %s\n", path, zmtp.CurvePublicPath(path))
	return exitOK, nil
}
