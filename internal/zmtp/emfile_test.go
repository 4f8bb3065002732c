package zmtp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAcceptFailureLogged: a listener whose process is out of file
// descriptors says that accepting fails (once, not every 10 ms retry), and
// takes the waiting peer once descriptors are free again. The listener
// runs in a child process (this test binary again) whose RLIMIT_NOFILE is
// lowered and then used up, so as not to starve the tests around it.
func TestAcceptFailureLogged(t *testing.T) {
	if ep := os.Getenv("ZMQX_EMFILE_CHILD"); ep != "" {
		emfileChild(ep)
		return
	}
	endpoint := "ipc://" + filepath.Join(t.TempDir(), "r.sock")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestAcceptFailureLogged$")
	cmd.Env = append(os.Environ(), "ZMQX_EMFILE_CHILD="+endpoint)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		<-exited
	}()
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	await := func(prefix string) string {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the child ended before %q; it said %q", prefix, seen)
				}
				seen = append(seen, l)
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-deadline:
				t.Fatalf("no %q from the child in 20 s; it said %q", prefix, seen)
			}
		}
	}
	await("full")
	dialed := make(chan error, 1)
	go func() {
		c, err := DialClient(context.Background(), "DEALER", endpoint, 30*time.Second, "")
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	if l := await("log accepting connections fails"); !strings.Contains(l, "too many open files") {
		t.Errorf("the log line does not say why: %q", l)
	}
	// Some 30 more retries (every 10 ms) before the descriptors are freed:
	// one line for them all, not one each. (A window for what must not
	// happen: nothing to wait for.)
	time.Sleep(300 * time.Millisecond)
	fmt.Fprintln(stdin, "free")
	select {
	case err := <-dialed:
		if err != nil {
			t.Fatalf("the peer was not taken once descriptors were free: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the peer was not taken in 30 s once descriptors were free")
	}
	stdin.Close()
	select {
	case err := <-exited: // (a race or a failure in the child fails this test)
		exited <- err
		if err != nil {
			t.Errorf("the child failed: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the child did not end in 20 s after its stdin closed")
	}
	for l := range lines {
		seen = append(seen, l)
	}
	n := 0
	for _, l := range seen {
		if strings.HasPrefix(l, "log accepting connections fails") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d log lines of failing accepts, want 1: %q", n, seen)
	}
}

// emfileChild listens at endpoint, uses up its descriptors, reports its
// listener's log lines on stdout, frees the descriptors when told to on
// stdin, and ends at its EOF.
func emfileChild(endpoint string) {
	pol := &Policy{Log: func(msg string, args ...any) { fmt.Println("log", msg, fmt.Sprint(args...)) }}
	r, err := ListenRouter(context.Background(), endpoint, pol, 0)
	if err != nil {
		fmt.Println("error", err)
		return
	}
	defer r.Close()
	r.SetHandler(func(in Incoming) { in.Peer.Release() })
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	rl.Cur = 256
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	var fill []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		fill = append(fill, fd)
	}
	fmt.Println("full", len(fill))
	in := bufio.NewReader(os.Stdin)
	if l, _ := in.ReadString('\n'); l == "free\n" {
		for _, fd := range fill {
			syscall.Close(fd)
		}
	}
	io.Copy(io.Discard, in)
}
