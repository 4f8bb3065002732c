package zmtp

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"github.com/exec-supervisor/exec-supervisor/internal/testenv"
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
		if _, err := statedir.ReadToken(p); err != nil {
			t.Fatalf("our own token: %v", err)
		}
		asOther(t, p)
		if _, err := statedir.ReadToken(p); err == nil || !strings.Contains(err.Error(), "owned by uid") {
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
		dir := statedir.RuntimeDir()
		if err := statedir.EnsurePrivate(dir); err != nil {
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
	// Another user's listener, standing in for a supervisor that wants
	// a token (it greets as a PLAIN server).
	nobody, py := testenv.Nobody(t)
	cmd := exec.CommandContext(ctx, nobody[0], append(nobody[1:], py, "-c",
		"import socket,time\ns=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print(s.getsockname()[1], flush=True)\n"+
			"c,_=s.accept(); c.sendall(bytes([0xff]+[0]*8+[0x7f,3,0])+b'PLAIN'+bytes(15)+bytes([1])+bytes(31)); time.sleep(60)")...)
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
	if err == nil || !strings.Contains(err.Error(), "uid 65534") || !strings.Contains(err.Error(), "not sending the default token") {
		t.Fatalf("the default token went to another user's listener: %v", err)
	}
}

// TestSharedSocket: with allowed uids or gids the socket is opened to them
// (mode 0666, or 0660 group-owned by the one allowed gid) and its
// directory made searchable (never listable or writable by them); the
// default runtime directory, which must stay private, is refused with a
// clear error.
func TestSharedSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the socket to another group")
	}
	for _, c := range []struct {
		name string
		pol  Policy
		mode os.FileMode
		gid  int
	}{
		{"uid", Policy{AllowUIDs: []int{65534}}, 0o666, 0},
		{"one gid", Policy{AllowGIDs: []int{4242}}, 0o660, 4242},
		{"two gids", Policy{AllowGIDs: []int{4242, 4343}}, 0o666, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "s")
			if err := os.Mkdir(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "c.sock")
			pol := c.pol
			r, err := ListenRouter(context.Background(), "ipc://"+sock, &pol, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			fi, err := os.Stat(sock)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != c.mode || int(fi.Sys().(*syscall.Stat_t).Gid) != c.gid {
				t.Fatalf("socket mode %o gid %d, want %o gid %d", fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, c.mode, c.gid)
			}
			if di, _ := os.Stat(dir); di.Mode().Perm() != 0o751 {
				t.Fatalf("directory mode %o, want 0751 (searchable, nothing more)", di.Mode().Perm())
			}
			r.Close()
			// Started again without allowed peers: the search permission
			// it added is taken back (what it was before stays).
			var logged []string
			r2, err := ListenRouter(context.Background(), "ipc://"+sock, &Policy{Log: func(msg string, _ ...any) { logged = append(logged, msg) }}, 0)
			if err != nil {
				t.Fatal(err)
			}
			r2.Close()
			if di, _ := os.Stat(dir); di.Mode().Perm() != 0o750 || len(logged) != 1 {
				t.Fatalf("without allowed peers: directory mode %o (want 0750), logged %q", di.Mode().Perm(), logged)
			}
			if _, err := os.Lstat(filepath.Join(dir, widenedNote)); !os.IsNotExist(err) {
				t.Fatalf("the note is still there: %v", err)
			}
		})
	}
	t.Run("private, way to it writable by others", func(t *testing.T) {
		// Private sockets start (clients refuse a swapped directory: the
		// most another user can do is keep them out), with a warning.
		open := worldWritableDir(t)
		dir := filepath.Join(open, "s")
		var logged []string
		listen := func() {
			t.Helper()
			r, err := ListenRouter(context.Background(), "ipc://"+filepath.Join(dir, "c.sock"), &Policy{Log: func(msg string, _ ...any) { logged = append(logged, msg) }}, 0)
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
		}
		listen()
		if len(logged) != 1 || !strings.Contains(logged[0], "others could replace the socket directory") {
			t.Fatalf("logged %q, want one warning about the way to the socket", logged)
		}
		// Under a sticky one (as /tmp): no warning (when the way above it
		// is clean: a TMPDIR in someone else's directory is not).
		for d := filepath.Dir(open); ; d = filepath.Dir(d) {
			if err := statedir.Check(d, true); err != nil {
				t.Skipf("the way to the test's directory is not clean: %v", err)
			}
			if d == filepath.Dir(d) {
				break
			}
		}
		if err := os.Chmod(open, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
		logged = nil
		listen()
		if len(logged) != 0 {
			t.Fatalf("under a sticky directory: logged %q", logged)
		}
	})
	t.Run("way to it writable by others", func(t *testing.T) {
		// Another user who can rename a directory on the way could swap
		// in theirs, with a symlink named like the socket.
		open := worldWritableDir(t)
		dir := filepath.Join(open, "s")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		r, err := ListenRouter(context.Background(), "ipc://"+filepath.Join(dir, "c.sock"), &Policy{AllowUIDs: []int{65534}}, 0)
		if err == nil {
			r.Close()
			t.Fatal("opened a socket to other users on a path others can change")
		}
		if !strings.Contains(err.Error(), "could change the way") {
			t.Fatalf("error: %v", err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "c.sock")); !os.IsNotExist(err) {
			t.Fatalf("the refused socket file is left: %v", err)
		}
	})
	t.Run("group directory keeps its bits", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "s")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, -1, 4242); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o750|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		r, err := ListenRouter(context.Background(), "ipc://"+filepath.Join(dir, "c.sock"), &Policy{AllowGIDs: []int{4242}}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		// Its group's already: searchable by it, nothing opened to others.
		if di, _ := os.Stat(dir); di.Mode()&(os.ModePerm|os.ModeSetgid) != 0o750|os.ModeSetgid {
			t.Fatalf("directory mode %v, want setgid 0750", di.Mode())
		}
	})
	t.Run("without allowed peers", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "s")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "c.sock")
		r, err := ListenRouter(context.Background(), "ipc://"+sock, &Policy{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if fi, _ := os.Stat(sock); fi.Mode().Perm() != 0o600 {
			t.Fatalf("socket mode %o, want 0600", fi.Mode().Perm())
		}
		if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
			t.Fatalf("directory mode %o changed", di.Mode().Perm())
		}
	})
	t.Run("default runtime directory", func(t *testing.T) {
		rt, err := os.MkdirTemp("", "rt")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(rt) })
		t.Setenv("XDG_RUNTIME_DIR", rt)
		r, err := ListenRouter(context.Background(), DefaultControl(), &Policy{AllowUIDs: []int{65534}}, 0)
		if err == nil {
			r.Close()
			t.Fatal("shared a socket in the private default runtime directory")
		}
		if !strings.Contains(err.Error(), "stays private") {
			t.Fatalf("error: %v", err)
		}
	})
}

// TestClientTrustsSupervisorDirectory: a client accepts a socket directory
// owned by another user (a supervisor that allows it in) only when nobody
// but root could have made it there: under a root-owned parent nobody
// else can write to, not under a world-writable one (sticky or not), and
// never one that others can write to.
func TestClientTrustsSupervisorDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make directories of another user")
	}
	mk := func(parentMode os.FileMode, mode os.FileMode) string {
		parent := t.TempDir()
		if err := os.Chmod(parent, parentMode); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(parent, "sup")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	if err := statedir.CheckPeer(mk(0o755, 0o711)); err != nil {
		t.Fatalf("a supervisor's directory under a root-owned parent: %v", err)
	}
	// A root-owned parent in a directory anyone can rename things in.
	deep := mk(0o755, 0o711)
	if err := os.Chmod(filepath.Dir(filepath.Dir(deep)), 0o777); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{
		"grandparent world-writable":       deep,
		"parent world-writable and sticky": mk(0o777|os.ModeSticky, 0o711),
		"parent world-writable":            mk(0o777, 0o711),
		"directory writable by others":     mk(0o755, 0o777),
	} {
		if err := statedir.CheckPeer(dir); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// worldWritableDir makes a directory anyone may write to (not sticky).
func worldWritableDir(t *testing.T) string {
	t.Helper()
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	return open
}

// TestTCPPeerUID: the uid of a loopback tcp peer comes from the socket
// table: ours for a connection of this process; none for the listener's
// own end looked up the wrong way round.
func TestTCPPeerUID(t *testing.T) {
	_, s := loopbackPair(t)
	if uid, ok := tcpPeerUID(s); !ok || uid != os.Geteuid() {
		t.Fatalf("peer uid %d (found %v); want ours, %d", uid, ok, os.Geteuid())
	}
	if _, ok := tcpPeerUID(fakeConn{s}); ok {
		t.Fatal("a connection with non-loopback addresses has a peer uid")
	}
}

// fakeConn reports a remote address off this machine.
type fakeConn struct{ net.Conn }

func (fakeConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 9} }
