package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tmux runs a tmux command on the test's private server socket.
func tmux(t *testing.T, sock string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestAttachUnderTmux drives `execctl attach` in a real terminal: typed
// input reaches the job, the window size is forwarded, Ctrl-] detaches and
// leaves the job running.
func TestAttachUnderTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (apt-get install -y tmux): attach needs a real terminal to test")
	}
	s := startSupervisor(t)
	dir := shortTempDir(t)
	bin := filepath.Join(dir, "execctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build execctl: %v\n%s", err, out)
	}
	id := s.spawnID(t, "--pty", "--", "sh", "-i")
	sock := filepath.Join(dir, "tmux.sock")
	cmdline := fmt.Sprintf("%s --control %s --event %s attach %s; echo ATTACH-EXIT=$?; sleep 30", bin, s.control, s.event, id)
	tmux(t, sock, "new-session", "-d", "-s", "t", "-x", "100", "-y", "30", cmdline)
	t.Cleanup(func() { exec.Command("tmux", "-S", sock, "kill-server").Run() })
	screen := func() string { return tmux(t, sock, "capture-pane", "-p", "-t", "t") }
	waitScreen := func(want string) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			sc := screen()
			if strings.Contains(sc, want) {
				return sc
			}
			if time.Now().After(deadline) {
				t.Fatalf("screen never showed %q:\n%s", want, sc)
			}
			time.Sleep(50 * time.Millisecond) // polling the terminal's screen
		}
	}
	waitScreen("attached to " + id)
	tmux(t, sock, "send-keys", "-t", "t", "echo typed-$((20+22))", "Enter")
	waitScreen("typed-42")
	// The window's size reaches the job.
	tmux(t, sock, "send-keys", "-t", "t", "stty size", "Enter")
	waitScreen("30 100")
	tmux(t, sock, "resize-window", "-t", "t", "-x", "120", "-y", "40")
	// SIGWINCH reaches execctl asynchronously: ask until the job sees it.
	deadline := time.Now().Add(10 * time.Second)
	answers := regexp.MustCompile(`(?m)^\d+ \d+\s*$`)
	for !strings.Contains(screen(), "40 120") {
		if time.Now().After(deadline) {
			t.Fatalf("the job never saw the new size:\n%s", screen())
		}
		n := len(answers.FindAllString(screen(), -1))
		tmux(t, sock, "send-keys", "-t", "t", "stty size", "Enter")
		for len(answers.FindAllString(screen(), -1)) == n && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond) // polling the screen for this stty's answer
		}
	}
	// Ctrl-] detaches; the job is still running.
	tmux(t, sock, "send-keys", "-t", "t", "C-]")
	waitScreen("ATTACH-EXIT=0")
	// (its own size is back: the attaching terminal's stayed on it)
	if st := s.jsonStatus(t, id); st["state"] != "running" || st["rows"] != float64(24) || st["cols"] != float64(80) {
		t.Fatalf("job after detach: %v; want running, 24x80 again", st)
	}
	s.mustCtl(t, "kill", id)
	_ = os.Remove(sock)
}

// TestTopUnderTmux: execctl top shows the running jobs in a real
// terminal and refreshes.
func TestTopUnderTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux not installed (apt-get install -y tmux): top needs a real terminal to test")
	}
	s := startSupervisor(t)
	dir := shortTempDir(t)
	bin := filepath.Join(dir, "execctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build execctl: %v\n%s", err, out)
	}
	id := s.spawnID(t, "--", "sh", "-c", "while :; do :; done")
	defer s.ctl(t, "kill", "--signal", "SIGKILL", id)
	sock := filepath.Join(dir, "tmux.sock")
	tmux(t, sock, "new-session", "-d", "-s", "t", "-x", "160", "-y", "20",
		fmt.Sprintf("%s --control %s --event %s top --interval 200ms", bin, s.control, s.event))
	t.Cleanup(func() { exec.Command("tmux", "-S", sock, "kill-server").Run() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		sc := tmux(t, sock, "capture-pane", "-p", "-t", "t")
		if strings.Contains(sc, id) && strings.Contains(sc, "running") && strings.Contains(sc, "%") && strings.Contains(sc, "1/50 jobs running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top never showed the job:\n%s", sc)
		}
		time.Sleep(50 * time.Millisecond) // polling the terminal's screen
	}
	tmux(t, sock, "send-keys", "-t", "t", "C-c")
}

// TestPollableDupLeavesTerminalBlocking: the non-blocking handle attach
// reads the terminal through does not make the terminal's other handles
// (stdout) non-blocking: a duplicate shared the flag, and attach died of
// EAGAIN writing output faster than the terminal took it (found by a
// PTY audit).
func TestPollableDupLeavesTerminalBlocking(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptmx.Close()
	rc, _ := ptmx.SyscallConn()
	var name string
	var perr error
	_ = rc.Control(func(fd uintptr) {
		if perr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); perr != nil {
			return
		}
		var n uint32
		n, perr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
		name = fmt.Sprintf("/dev/pts/%d", n)
	})
	if perr != nil {
		t.Fatal(perr)
	}
	tty, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tty)
	in, err := pollableDup(tty)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	fl, err := unix.FcntlInt(uintptr(tty), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fl&unix.O_NONBLOCK != 0 {
		t.Fatal("the terminal's own handle became non-blocking")
	}
}

// TestStripTerminalQueries: replayed output loses the sequences that make
// a terminal answer (their answers would be typed into the job: found by
// a PTY audit), and keeps everything else, colours and cursor moves too.
func TestStripTerminalQueries(t *testing.T) {
	for in, want := range map[string]string{
		"a\x1b[6nb":                       "ab",
		"\x1b[5n\x1b[?6n":                 "",
		"\x1b[c\x1b[>c\x1b[0c":            "",
		"\x1b[?2004$p":                    "",
		"\x1b[18t\x1b[8;24;80t":           "\x1b[8;24;80t", // (a resize, not a report)
		"\x1b]10;?\x07\x1b]11;?\x1b\\":    "",
		"\x1b]0;title\x07":                "\x1b]0;title\x07",
		"\x1b[31mred\x1b[0m\x1b[2J\x1b[H": "\x1b[31mred\x1b[0m\x1b[2J\x1b[H",
		"\x1bZx":                          "x",
		"\x1b[>q\x1b[?u\x1b[>4;?m":        "",                           // XTVERSION, kitty keyboard, modifyOtherKeys queries
		"\x1bP$qm\x1b\\\x1bP+q544e\x1b\\": "",                           // DECRQSS, XTGETTCAP
		"\x1b[>1n\x1b]2;what;?x\x07":      "\x1b[>1n\x1b]2;what;?x\x07", // a setting; a title
		"\x1b[\x1b[6n":                    "\x1b[",                      // an unfinished CSI, then a query
		"tail\x1b[":                       "tail\x1b[",
	} {
		if got := string(stripTerminalQueries([]byte(in))); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// TestAttachFinishedJob: attach to a PTY job that ended is a failure
// (exit 1) that says where its output is, not a usage error (exit 2).
func TestAttachFinishedJob(t *testing.T) {
	t.Parallel()
	s := startSupervisor(t)
	id := s.spawnID(t, "--pty", "--", "true")
	if code, _, errs := s.ctl(t, "wait", id); code != 0 {
		t.Fatalf("wait: %d %s", code, errs)
	}
	if code, _, errs := s.ctl(t, "attach", id); code != 1 || !strings.Contains(errs, "already ended") || !strings.Contains(errs, "logs") {
		t.Fatalf("attach to a finished job: exit %d, %q; want 1, already ended, logs", code, errs)
	}
}
