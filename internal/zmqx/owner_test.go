package zmqx

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// nobody is a uid other than ours for files made another user's (chown
// needs root: the tests skip without it).
const nobody = 65534

func asOther(t *testing.T, path string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	if err := os.Lchown(path, nobody, nobody); err != nil {
		t.Fatal(err)
	}
}

// TestOthersFilesAreRefused: what another local user made or can change is
// never trusted (found by a security audit, each turned into running a
// command as the supervisor's user or into reading its clients' requests):
// a token file of theirs (they know the token), a socket directory they
// can write to (they can move the socket away and bind theirs), and on the
// client side, a default runtime directory of theirs (made in a shared
// TMPDIR before ours: their "supervisor" would get our spawns, env and
// all).
func TestOthersFilesAreRefused(t *testing.T) {
	t.Run("token", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(p, []byte("known-to-them\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadToken(p); err != nil {
			t.Fatalf("our own token: %v", err)
		}
		asOther(t, p)
		if _, err := ReadToken(p); err == nil || !strings.Contains(err.Error(), "owned by uid") {
			t.Fatalf("another user's token was read: %v", err)
		}
	})
	t.Run("socket directory writable by others", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "shared")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		ep := "ipc://" + filepath.Join(dir, "c.sock")
		if r, err := ListenRouter(context.Background(), ep, nil, 0); err == nil {
			r.Close()
			t.Fatal("listened in a directory anyone can write to")
		} else if !strings.Contains(err.Error(), "others could replace") {
			t.Fatalf("error: %v", err)
		}
		// Sticky (as /tmp): nobody else can move our socket.
		if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		r, err := ListenRouter(context.Background(), ep, nil, 0)
		if err != nil {
			t.Fatalf("sticky directory: %v", err)
		}
		r.Close()
	})
	t.Run("socket directory of another user", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "theirs")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		asOther(t, dir)
		if r, err := ListenRouter(context.Background(), "ipc://"+filepath.Join(dir, "c.sock"), nil, 0); err == nil {
			r.Close()
			t.Fatal("listened in another user's directory")
		}
	})
	t.Run("client: default directory of another user", func(t *testing.T) {
		rt, err := os.MkdirTemp("", "rt") // (short: a socket path has 108 bytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(rt) })
		t.Setenv("XDG_RUNTIME_DIR", rt)
		dir := DefaultRuntimeDir()
		if err := EnsurePrivateDir(dir); err != nil {
			t.Fatal(err)
		}
		r, err := ListenRouter(context.Background(), DefaultControl(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := DialClient(ctx, "DEALER", DefaultControl(), time.Second, "")
		if err != nil {
			t.Fatalf("our own default directory: %v", err)
		}
		c.Close()
		asOther(t, dir)
		if c, err := DialClient(ctx, "DEALER", DefaultControl(), time.Second, ""); err == nil {
			c.Close()
			t.Fatal("connected to a socket in another user's default directory")
		} else if !strings.Contains(err.Error(), "owned by uid") {
			t.Fatalf("error: %v", err)
		}
	})
}

// TestDefaultTokenOnlyToOwnListener: a token the client found by itself
// (the supervisor's default token file) is not sent to a tcp listener of
// another user: PLAIN does not authenticate the server, and a user who
// took the port while the supervisor was down got the token (security
// audit). Our own listener gets it.
func TestDefaultTokenOnlyToOwnListener(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := ListenRouter(ctx, "tcp://127.0.0.1:0", &Policy{Token: "tok"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := DialClientWith(ctx, "DEALER", "tcp://"+r.Addr().String(), DialOptions{Token: "tok", TokenToOwnOnly: true})
	if err != nil {
		t.Fatalf("our own listener: %v", err)
	}
	c.Close()
	if os.Geteuid() != 0 {
		t.Skip("needs root to listen as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to listen as another user")
	}
	// Another user's listener (it reads nothing: the handshake would
	// just time out).
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3 to listen as another user")
	}
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", py, "-c",
		"import socket,time\ns=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	port := strings.TrimSpace(line)
	if err != nil || port == "" {
		t.Skipf("no listener as another user (%v)", err)
	}
	_, err = DialClientWith(ctx, "DEALER", "tcp://127.0.0.1:"+port, DialOptions{Token: "tok", TokenToOwnOnly: true, Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Fatalf("the default token went to another user's listener: %v", err)
	}
}
