package notify

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// wait bounds every wait for something the socket should deliver.
const wait = 10 * time.Second

// listen starts a Socket at path whose messages go to the returned channel.
func listen(t *testing.T, path string, accept func(int) bool) (*Socket, <-chan Message) {
	t.Helper()
	ch := make(chan Message, 64)
	s, err := Listen(path, accept, func(m Message) { ch <- m })
	if err != nil {
		t.Fatalf("Listen(%q): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, ch
}

func acceptAll(int) bool { return true }

func acceptSelf(pid int) bool { return pid == os.Getpid() }

// recv waits for the next message.
func recv(t *testing.T, ch <-chan Message) Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(wait):
		t.Fatal("no message within", wait)
		return Message{}
	}
}

// noMore checks that nothing else was delivered. It is meaningful only
// after a later datagram has been received: datagrams arrive in order.
func noMore(t *testing.T, ch <-chan Message) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message %+v", m)
	default:
	}
}

// dial connects a datagram client to addr.
func dial(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatalf("dial %q: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c *net.UnixConn, body string) {
	t.Helper()
	if _, err := c.Write([]byte(body)); err != nil {
		t.Fatalf("send %q: %v", body, err)
	}
}

// sentinel sends a final good message and waits for it, so that everything
// sent before has been processed.
func sentinel(t *testing.T, c *net.UnixConn, ch <-chan Message) {
	t.Helper()
	send(t, c, "X_SENTINEL=1")
	if m := recv(t, ch); m.Fields["X_SENTINEL"] != "1" {
		t.Fatalf("got %+v, want the sentinel", m)
	}
}

func TestReadyAndStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify.sock")
	s, ch := listen(t, path, acceptSelf)
	if s.Addr() != path {
		t.Fatalf("Addr = %q, want %q", s.Addr(), path)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket file mode %v, want a socket with 0666", fi.Mode())
	}

	c := dial(t, s.Addr())
	send(t, c, "READY=1\nSTATUS=hello\n")
	m := recv(t, ch)
	if m.Pid != os.Getpid() || m.Uid != uint32(os.Getuid()) || m.Gid != uint32(os.Getgid()) {
		t.Fatalf("credentials pid=%d uid=%d gid=%d, want %d %d %d",
			m.Pid, m.Uid, m.Gid, os.Getpid(), os.Getuid(), os.Getgid())
	}
	if !m.Ready() || m.Watchdog() || m.Stopping() {
		t.Fatalf("Ready/Watchdog/Stopping = %v/%v/%v for %v", m.Ready(), m.Watchdog(), m.Stopping(), m.Fields)
	}
	if st, ok := m.Status(); !ok || st != "hello" {
		t.Fatalf("Status = %q, %v", st, ok)
	}
	if len(m.Fields) != 2 {
		t.Fatalf("Fields = %v", m.Fields)
	}

	send(t, c, "WATCHDOG=1\nSTOPPING=1\nMAINPID=42")
	m = recv(t, ch)
	if !m.Watchdog() || !m.Stopping() || m.Ready() || m.Fields["MAINPID"] != "42" {
		t.Fatalf("second message %v", m.Fields)
	}
	if _, ok := m.Status(); ok {
		t.Fatal("Status present in a message without STATUS")
	}
	if s.Rejected() != 0 {
		t.Fatalf("Rejected = %d", s.Rejected())
	}
}

func TestRejectedSender(t *testing.T) {
	var calls atomic.Int32
	// Refuse the first datagram only; accept is called from one goroutine.
	accept := func(pid int) bool { return calls.Add(1) > 1 && pid == os.Getpid() }
	s, ch := listen(t, filepath.Join(t.TempDir(), "n.sock"), accept)
	c := dial(t, s.Addr())
	send(t, c, "READY=1\nSTATUS=first")
	send(t, c, "STATUS=second")
	m := recv(t, ch)
	if st, _ := m.Status(); st != "second" || m.Ready() {
		t.Fatalf("got %v, want only the second message", m.Fields)
	}
	noMore(t, ch)
	if got := s.Rejected(); got != 1 {
		t.Fatalf("Rejected = %d, want 1", got)
	}
	if got := calls.Load(); got != 2 {
		t.Fatalf("accept called %d times, want 2", got)
	}
}

func TestDuplicateKeysLaterWins(t *testing.T) {
	s, ch := listen(t, filepath.Join(t.TempDir(), "n.sock"), acceptSelf)
	c := dial(t, s.Addr())
	send(t, c, "STATUS=a\n\n\nSTATUS=b=c\nREADY=0")
	m := recv(t, ch)
	if st, _ := m.Status(); st != "b=c" || m.Ready() {
		t.Fatalf("Fields = %v", m.Fields)
	}
}

// systemdNotify returns the systemd-notify binary or skips the test.
func systemdNotify(t *testing.T) string {
	p, err := exec.LookPath("systemd-notify")
	if err != nil {
		t.Skip("systemd-notify not installed: ", err)
	}
	return p
}

// runNotify runs systemd-notify with NOTIFY_SOCKET=addr and checks that it
// returns quickly: it waits up to 5s for its barrier (a passed pipe
// descriptor) to be closed, so a fast exit shows the descriptor was closed.
func runNotify(t *testing.T, cmd *exec.Cmd, addr string) {
	t.Helper()
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+addr)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v: %s", cmd.Args, err, out)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("systemd-notify took %v: barrier descriptor not closed?", d)
	}
}

func TestSystemdNotify(t *testing.T) {
	bin := systemdNotify(t)
	senders := make(chan int, 16)
	s, ch := listen(t, filepath.Join(t.TempDir(), "n.sock"), func(pid int) bool {
		senders <- pid
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--ready", "--status=x")
	runNotify(t, cmd, s.Addr())
	m := recv(t, ch)
	if !m.Ready() {
		t.Fatalf("first message %v, want READY=1", m.Fields)
	}
	if st, ok := m.Status(); !ok || st != "x" {
		t.Fatalf("Status = %q, %v", st, ok)
	}
	// The barrier follows, from systemd-notify's own pid.
	b := recv(t, ch)
	if b.Fields["BARRIER"] != "1" || b.Pid != cmd.Process.Pid {
		t.Errorf("second message %+v, want BARRIER=1 from pid %d", b, cmd.Process.Pid)
	}
	t.Logf("systemd-notify pid %d, its parent %d; READY from pid %d, BARRIER from pid %d",
		cmd.Process.Pid, os.Getpid(), m.Pid, b.Pid)
	// systemd-notify claims its parent's pid in explicit credentials; the
	// kernel allows that only with CAP_SYS_ADMIN, and libsystemd falls back
	// to the real pid when refused.
	if m.Pid != os.Getpid() && m.Pid != cmd.Process.Pid {
		t.Errorf("READY from pid %d, want the parent %d or systemd-notify %d", m.Pid, os.Getpid(), cmd.Process.Pid)
	}
	if os.Getuid() == 0 && m.Pid != os.Getpid() {
		t.Errorf("as root, READY from pid %d, want the claimed parent pid %d", m.Pid, os.Getpid())
	}
}

// TestSystemdNotifyUnprivileged runs systemd-notify as an unprivileged user:
// its claim of the parent's pid is refused and it sends with its own.
func TestSystemdNotifyUnprivileged(t *testing.T) {
	bin := systemdNotify(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to switch to another user")
	}
	const nobody = 65534
	// An abstract socket: the temporary directory is not searchable by nobody.
	name := "@exec-supervisor-test/" + strconv.Itoa(os.Getpid()) + "/" + t.Name()
	s, ch := listen(t, name, acceptAll)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--ready")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	runNotify(t, cmd, s.Addr())
	m := recv(t, ch)
	if !m.Ready() || m.Pid != cmd.Process.Pid || m.Uid != nobody || m.Gid != nobody {
		t.Fatalf("got %+v, want READY=1 from pid %d uid/gid %d", m, cmd.Process.Pid, nobody)
	}
}

// pythonSender sends one datagram from a python3 child process to addr.
const pythonSender = `
import os, socket, sys
addr = sys.argv[1]
if addr.startswith("@"):
    addr = "\0" + addr[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.sendto(("READY=1\nSTATUS=child %d" % os.getpid()).encode(), addr)
`

func python(t *testing.T) string {
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: ", err)
	}
	return p
}

// runPython sends from a child process and returns its pid.
func runPython(t *testing.T, addr string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, python(t), "-c", pythonSender, addr)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python3 sender: %v: %s", err, out)
	}
	return cmd.Process.Pid
}

func TestChildProcessPid(t *testing.T) {
	s, ch := listen(t, filepath.Join(t.TempDir(), "n.sock"), func(pid int) bool { return pid != os.Getpid() })
	pid := runPython(t, s.Addr())
	m := recv(t, ch)
	if m.Pid != pid {
		t.Fatalf("message pid %d, want the child's %d", m.Pid, pid)
	}
	if st, _ := m.Status(); st != "child "+strconv.Itoa(pid) || !m.Ready() {
		t.Fatalf("Fields = %v", m.Fields)
	}
}

func TestAbstractFallback(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	path := filepath.Join(dir, "notify.sock") // dir does not even exist
	if len(path) <= maxSunPath {
		t.Fatalf("path %q is not long enough", path)
	}
	s, ch := listen(t, path, acceptSelf)
	addr := s.Addr()
	if !strings.HasPrefix(addr, "@exec-supervisor/") || len(addr) > maxSunPath {
		t.Fatalf("Addr = %q, want a short abstract name", addr)
	}
	c := dial(t, addr)
	send(t, c, "READY=1")
	if m := recv(t, ch); !m.Ready() || m.Pid != os.Getpid() {
		t.Fatalf("got %+v", m)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("abstract socket touched the file system: %v", err)
	}

	// The name is deterministic: the same path collides, another does not.
	if s2, err := Listen(path, acceptAll, func(Message) {}); err == nil {
		s2.Close()
		t.Fatal("second Listen on the same long path succeeded")
	} else if !errors.Is(err, unix.EADDRINUSE) {
		t.Fatalf("second Listen: %v, want EADDRINUSE", err)
	}
	s3, _ := listen(t, path+"2", acceptAll)
	if s3.Addr() == addr {
		t.Fatal("different paths got the same abstract name")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s4, _ := listen(t, path, acceptAll)
	if s4.Addr() != addr {
		t.Fatalf("Addr after re-listen %q, want %q", s4.Addr(), addr)
	}
}

func TestAbstractFromPython(t *testing.T) {
	path := filepath.Join(t.TempDir(), strings.Repeat("x", 120))
	s, ch := listen(t, path, acceptAll)
	pid := runPython(t, s.Addr())
	if m := recv(t, ch); m.Pid != pid || !m.Ready() {
		t.Fatalf("got %+v, want READY from pid %d", m, pid)
	}
}

func TestExplicitAbstractAndRelativePath(t *testing.T) {
	name := "@exec-supervisor-test/" + strconv.Itoa(os.Getpid()) + "/" + t.Name()
	s, ch := listen(t, name, acceptSelf)
	if s.Addr() != name {
		t.Fatalf("Addr = %q, want %q", s.Addr(), name)
	}
	send(t, dial(t, name), "READY=1")
	if m := recv(t, ch); !m.Ready() {
		t.Fatalf("got %+v", m)
	}

	dir := t.TempDir()
	t.Chdir(dir)
	s2, ch2 := listen(t, "rel.sock", acceptSelf)
	if want := filepath.Join(dir, "rel.sock"); s2.Addr() != want {
		t.Fatalf("Addr = %q, want absolute %q", s2.Addr(), want)
	}
	send(t, dial(t, s2.Addr()), "READY=1")
	if m := recv(t, ch2); !m.Ready() {
		t.Fatalf("got %+v", m)
	}
}

func TestMalformedRejected(t *testing.T) {
	bad := []string{
		"READY",
		"READY=1\nnoequals",
		"=1",
		"ready=1",
		"READY =1",
		"RE-ADY=1",
		"STATUS=a\x00b",
		"\x00",
		"STATUS=ok\n=x\n",
		"ÄÖ=1",
	}
	s, ch := listen(t, filepath.Join(t.TempDir(), "n.sock"), acceptSelf)
	c := dial(t, s.Addr())
	for _, b := range bad {
		send(t, c, b)
	}
	sentinel(t, c, ch)
	noMore(t, ch)
	if got := s.Rejected(); got != uint64(len(bad)) {
		t.Fatalf("Rejected = %d, want %d", got, len(bad))
	}

	// An empty datagram has no fields but is not malformed.
	send(t, c, "")
	if m := recv(t, ch); m.Fields == nil || len(m.Fields) != 0 {
		t.Fatalf("empty datagram gave %+v", m)
	}
}

func TestOversizedRejected(t *testing.T) {
	s, ch := listen(t, filepath.Join(t.TempDir(), "n.sock"), acceptSelf)
	c := dial(t, s.Addr())
	// Every prefix of this parses, so only truncation detection rejects it.
	big := "STATUS=" + strings.Repeat("a", 8<<10)
	send(t, c, big)
	exact := "STATUS=" + strings.Repeat("b", MaxMessage-len("STATUS="))
	send(t, c, exact)
	m := recv(t, ch)
	if st, _ := m.Status(); st != exact[len("STATUS="):] {
		t.Fatalf("got a %d byte STATUS, want the %d byte message", len(st), MaxMessage)
	}
	sentinel(t, c, ch)
	if got := s.Rejected(); got != 1 {
		t.Fatalf("Rejected = %d, want 1", got)
	}
}

// fdCount counts this process's open descriptors.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// expectEOF checks that every write end of r's pipe is closed.
func expectEOF(t *testing.T, r *os.File) {
	t.Helper()
	if err := r.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read from pipe: %d, %v; want EOF (passed descriptor still open)", n, err)
	}
}

func TestPassedDescriptorsClosed(t *testing.T) {
	// Decisions for the next calls of accept, in order; true when empty.
	decisions := make(chan bool, 1)
	s, ch := listen(t, filepath.Join(t.TempDir(), "n.sock"), func(int) bool {
		select {
		case d := <-decisions:
			return d
		default:
			return true
		}
	})
	c := dial(t, s.Addr())
	raw, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(raw)
	before := fdCount(t)

	cases := []struct {
		name   string
		body   string
		accept bool
		fds    int
	}{
		{"accepted", "READY=1", true, 1},
		{"many", "FDSTORE=1", true, 100},
		{"rejected by accept", "READY=1", false, 3},
		{"malformed", "garbage", true, 2},
		{"oversized", strings.Repeat("Z", 2*MaxMessage), true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.accept {
				decisions <- false
			}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			rejected := s.Rejected()
			fds := make([]int, tc.fds)
			for i := range fds {
				fds[i] = int(w.Fd())
			}
			// A connected net.UnixConn refuses to send control data, so
			// send from a raw socket; it is queued before the sentinel.
			if err := unix.Sendmsg(raw, []byte(tc.body), unix.UnixRights(fds...), &unix.SockaddrUnix{Name: s.Addr()}, 0); err != nil {
				t.Fatal(err)
			}
			w.Close()
			sentinelOrMessage(t, c, ch, tc.body)
			_, perr := Parse([]byte(tc.body))
			want := uint64(0)
			if !tc.accept || perr != nil {
				want = 1
			}
			if got := s.Rejected() - rejected; got != want {
				t.Fatalf("rejected %d, want %d", got, want)
			}
			expectEOF(t, r)
		})
	}
	if after := fdCount(t); after != before {
		t.Fatalf("open descriptors %d before, %d after", before, after)
	}
}

// sentinelOrMessage drains deliveries up to and including the sentinel.
func sentinelOrMessage(t *testing.T, c *net.UnixConn, ch <-chan Message, body string) {
	t.Helper()
	send(t, c, "X_SENTINEL=1")
	for {
		m := recv(t, ch)
		if m.Fields["X_SENTINEL"] == "1" {
			return
		}
		if want, _ := Parse([]byte(body)); !maps.Equal(m.Fields, want) {
			t.Fatalf("unexpected message %v", m.Fields)
		}
	}
}

func TestNoCredentialsRejected(t *testing.T) {
	var handled atomic.Int32
	s := &Socket{
		accept: func(int) bool { return true },
		handle: func(Message) { handled.Add(1) },
	}
	s.deliver([]byte("READY=1"), nil, true, 0)
	s.deliver([]byte("READY=1"), &unix.Ucred{Pid: 0}, true, 0)
	s.deliver([]byte("READY=1"), &unix.Ucred{Pid: 1}, false, 0)
	s.deliver([]byte("READY=1"), &unix.Ucred{Pid: 1}, true, unix.MSG_CTRUNC)
	s.deliver([]byte("READY=1"), &unix.Ucred{Pid: 1}, true, unix.MSG_TRUNC)
	if handled.Load() != 0 || s.Rejected() != 5 {
		t.Fatalf("handled %d, rejected %d; want 0, 5", handled.Load(), s.Rejected())
	}
	s.deliver([]byte("READY=1"), &unix.Ucred{Pid: 1}, true, 0)
	if handled.Load() != 1 {
		t.Fatal("good message not handled")
	}
}

func TestReadControl(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dup, err := unix.FcntlInt(w.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	cred := unix.Ucred{Pid: 7, Uid: 8, Gid: 9}
	b := append(unix.UnixRights(dup), unix.UnixCredentials(&cred)...)
	got, ok := readControl(b)
	if !ok || got == nil || *got != cred {
		t.Fatalf("readControl = %+v, %v", got, ok)
	}
	expectEOF(t, r)

	// Truncated or garbage control data is reported, never a panic.
	for _, bad := range [][]byte{b[:3], b[:unix.CmsgLen(0)], bytes.Repeat([]byte{0xff}, 40)} {
		if _, ok := readControl(bad); ok {
			t.Fatalf("readControl(%x) ok", bad)
		}
	}
	if c, ok := readControl(unix.UnixRights()); !ok || c != nil {
		t.Fatalf("readControl(no fds) = %v, %v", c, ok)
	}
}

func TestClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.sock")
	s, _ := listen(t, path, acceptAll)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	default:
		t.Fatal("reader goroutine still running after Close")
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The path is free again.
	s2, ch := listen(t, path, acceptSelf)
	send(t, dial(t, path), "READY=1")
	recv(t, ch)
	s2.Close()
}

func TestCloseKeepsReplacedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.sock")
	s, _ := listen(t, path, acceptAll)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("someone else's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Close removed a file it did not create: %v", err)
	}
}

func TestCloseWhileHandling(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var handled atomic.Int32
	s, err := Listen(filepath.Join(t.TempDir(), "n.sock"), acceptAll, func(Message) {
		if handled.Add(1) == 1 {
			close(entered)
			<-release
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s.Addr())
	send(t, c, "READY=1")
	send(t, c, "STATUS=queued")
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("handler not called")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Close did not return after the handler did")
	}
	if n := handled.Load(); n > 2 {
		t.Fatalf("handled %d", n)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.sock")
	// A socket file whose owner is gone, as a crashed supervisor leaves it.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	s, ch := listen(t, path, acceptSelf)
	send(t, dial(t, s.Addr()), "READY=1")
	recv(t, ch)

	// A live socket is not stolen.
	if s2, err := Listen(path, acceptAll, func(Message) {}); err == nil {
		s2.Close()
		t.Fatal("Listen stole a live socket")
	}
	// Neither is a regular file replaced.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s3, err := Listen(file, acceptAll, func(Message) {}); err == nil {
		s3.Close()
		t.Fatal("Listen replaced a regular file")
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
}

func TestListenArguments(t *testing.T) {
	dir := t.TempDir()
	if _, err := Listen(filepath.Join(dir, "a"), nil, func(Message) {}); err == nil {
		t.Fatal("nil accept accepted")
	}
	if _, err := Listen(filepath.Join(dir, "b"), acceptAll, nil); err == nil {
		t.Fatal("nil handle accepted")
	}
	if _, err := Listen("", acceptAll, func(Message) {}); err == nil {
		t.Fatal("empty path accepted")
	}
	if _, err := Listen(filepath.Join(dir, "d\x00e"), acceptAll, func(Message) {}); err == nil {
		t.Fatal("path with NUL accepted")
	}
	_, err := Listen(filepath.Join(dir, "missing", "c"), acceptAll, func(Message) {})
	if !errors.Is(err, unix.ENOENT) {
		t.Fatalf("Listen in a missing directory: %v, want ENOENT", err)
	}
}

// TestManySenders checks that a flood of bad datagrams from one sender does
// not stop another's from being delivered.
func TestManySenders(t *testing.T) {
	s, ch := listen(t, filepath.Join(t.TempDir(), "n.sock"), acceptSelf)
	bad, good := dial(t, s.Addr()), dial(t, s.Addr())
	for i := range 50 {
		send(t, bad, "bad line "+strconv.Itoa(i))
	}
	send(t, good, "READY=1")
	if m := recv(t, ch); !m.Ready() {
		t.Fatalf("got %v", m.Fields)
	}
	if s.Rejected() != 50 {
		t.Fatalf("Rejected = %d", s.Rejected())
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"\n\n", map[string]string{}},
		{"READY=1", map[string]string{"READY": "1"}},
		{"A=1\nA=2\n", map[string]string{"A": "2"}},
		{"STATUS=", map[string]string{"STATUS": ""}},
		{"STATUS=a=b c\r", map[string]string{"STATUS": "a=b c\r"}},
		{"X_1=é", map[string]string{"X_1": "é"}},
	} {
		got, err := Parse([]byte(tc.in))
		if err != nil || !maps.Equal(got, tc.want) || got == nil {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"A", "=", "a=1", "A B=1", "A=1\x00", strings.Repeat("A", MaxMessage+1)} {
		if got, err := Parse([]byte(in)); err == nil {
			t.Errorf("Parse(%.20q) = %v, want an error", in, got)
		}
	}
	if _, err := Parse([]byte("A=" + strings.Repeat("a", MaxMessage-2))); err != nil {
		t.Errorf("Parse of exactly MaxMessage bytes: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "READY=1", "READY=1\nSTATUS=hi\n", "=", "a=b", "A=1\x00", "\n\nX=\n", "MAINPID=12\nWATCHDOG_USEC=5"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fields, err := Parse(b)
		if err != nil {
			return
		}
		if len(b) > MaxMessage || bytes.IndexByte(b, 0) >= 0 {
			t.Fatalf("Parse accepted %q", b)
		}
		// Re-encoding the fields gives the same fields back.
		var enc []byte
		for k, v := range fields {
			if !validKey([]byte(k)) || strings.ContainsRune(v, '\n') {
				t.Fatalf("bad field %q=%q", k, v)
			}
			enc = append(enc, k+"="+v+"\n"...)
		}
		if len(enc) > MaxMessage {
			return
		}
		again, err := Parse(enc)
		if err != nil || !maps.Equal(again, fields) {
			t.Fatalf("round trip of %q: %v, %v", b, again, err)
		}
	})
}

// TestRemoveStale: the socket files nobody listens on are removed; a
// listened one, and anything not a socket, stay.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	live, err := Listen(filepath.Join(dir, "live.sock"), func(int) bool { return true }, func(Message) {})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// A socket file whose owner is gone (as a killed supervisor's).
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: filepath.Join(dir, "dead.sock")}); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := RemoveStale(dir)
	if err != nil || n != 1 {
		t.Fatalf("removed %d (%v), want 1", n, err)
	}
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{"live.sock", "other"}) {
		t.Fatalf("left %v, want the live socket and the other file", left)
	}
	if n, err := RemoveStale(filepath.Join(dir, "missing")); n != 0 || err != nil {
		t.Fatalf("missing dir: %d, %v", n, err)
	}
}
