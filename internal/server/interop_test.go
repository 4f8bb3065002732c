package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pythonWithZMQ returns a python interpreter that can import zmq and
// msgpack (libzmq through pyzmq), trying Debian's /usr/bin/python3 before
// the python3 first on PATH, and the interpreters it tried.
func pythonWithZMQ() (string, []string) { return pythonImporting("zmq, msgpack") }

// pythonImporting returns a python interpreter that can import modules
// (as "import" takes them), as pythonWithZMQ does.
func pythonImporting(modules string) (string, []string) {
	var tried []string
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, py := range candidates {
		tried = append(tried, py)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := exec.CommandContext(ctx, py, "-c", "import "+modules).Run()
		cancel()
		if err == nil {
			return py, tried
		}
	}
	return "", tried
}

// TestPythonClientInterop runs testdata/pyclient.py, a client written from
// the wire format alone on libzmq (pyzmq) and msgpack, against a server on
// ipc and on tcp endpoints: REQ and DEALER control, PUB/SUB events, the
// subscribe op, heartbeats, error replies, and a paced job (spawn pace,
// the pace op) followed through subscribe without losing a byte.
func TestPythonClientInterop(t *testing.T) {
	py, tried := pythonWithZMQ()
	if py == "" {
		t.Skipf("no python3 that can import zmq and msgpack (tried %s); install them with: "+
			"apt-get install -y python3-zmq python3-msgpack (or: pip install pyzmq msgpack)", strings.Join(tried, ", "))
	}
	script, err := filepath.Abs(filepath.Join("testdata", "pyclient.py"))
	if err != nil {
		t.Fatal(err)
	}
	eachTransport(t, func(t *testing.T, cfg Config, ts *testServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if strings.HasPrefix(cfg.Control, "tcp://") {
			// libzmq PLAIN clients: a wrong token is refused. (Without
			// one, as our uid on loopback, it is served:
			// TestOpenClawOnLoopbackWithoutToken.)
			for _, tok := range []string{"wrong-" + ts.token} {
				out, err := exec.CommandContext(ctx, py, script, cfg.Control, cfg.Event, tok, "--expect-refused").CombinedOutput()
				if err != nil || !strings.Contains(string(out), "PYCLIENT REFUSED") {
					t.Fatalf("token %q: %v\n%s", tok, err, out)
				}
			}
		}
		cmd := exec.CommandContext(ctx, py, script, cfg.Control, cfg.Event, ts.token)
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s %s %s: %v (ctx: %v)\n%s", py, script, cfg.Control, cfg.Event, err, ctx.Err(), out)
		}
		if !strings.Contains(string(out), "PYCLIENT OK") {
			t.Fatalf("pyclient exited 0 without PYCLIENT OK:\n%s", out)
		}
		t.Logf("%s pyclient output:\n%s", py, out)
	})
}

// nodeModules returns the node binary and testdata/node, skipping t when
// either node or one of the modules is missing.
func nodeModules(t *testing.T, modules ...string) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH; install Node.js (Debian: nodejs npm) to run the zeromq.js clients")
	}
	if dir, err = filepath.Abs(filepath.Join("testdata", "node")); err != nil {
		t.Fatal(err)
	}
	for _, m := range modules {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", m, "package.json")); err != nil {
			t.Skipf("zeromq.js modules not installed (%s missing); install them with: npm install --prefix %s (.ci/run does)", m, dir)
		}
	}
	return node, dir
}

// TestNodeClientInterop runs testdata/node/nodeclient.mjs, a client
// written from docs/protocol.md alone on zeromq.js (libzmq) and
// @msgpack/msgpack, as a TypeScript gateway would be, against a server on
// ipc and on tcp (PLAIN) endpoints. Its modules come from
// `npm install --prefix internal/server/testdata/node` (.ci/run does it).
func TestNodeClientInterop(t *testing.T) {
	node, dir := nodeModules(t, "zeromq", "@msgpack/msgpack")
	eachTransport(t, func(t *testing.T, cfg Config, ts *testServer) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args := []string{filepath.Join(dir, "nodeclient.mjs"), cfg.Control, cfg.Event}
		if strings.HasPrefix(cfg.Control, "tcp://") {
			args = append(args, ts.token)
		}
		cmd := exec.CommandContext(ctx, node, args...)
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "NODECLIENT OK") {
			t.Fatalf("%s %s: %v (ctx: %v)\n%s", node, strings.Join(args, " "), err, ctx.Err(), out)
		}
		t.Logf("nodeclient output:\n%s", out)
	})
}
