package jobs

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/exec-supervisor/exec-supervisor/internal/jobs/lifecycle"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// procFiles are the descriptors of one start: the child's ends (closed
// once it has them) and ours.
type procFiles struct {
	childFds   []int      // pipe ends of the child's stdio
	childFiles []*os.File // the terminal's slave side
	parent     []*os.File // the terminal's master
	// out are the read ends of the stdout and stderr pipes, when pipes is
	// set (not for a terminal): non-blocking plain descriptors, read by
	// runLoop or made *os.File (in Go's netpoller) for readLoop.
	out [2]int
	// outW are the child's ends of those pipes, when pipes is set.
	outW  [2]int
	pipes bool
}

// noFiles is a start's procFiles before any descriptor is made (pipes:
// for a start with output pipes, not a terminal).
func noFiles(pipes bool) procFiles {
	return procFiles{out: [2]int{-1, -1}, outW: [2]int{-1, -1}, pipes: pipes}
}

// closeParent closes our ends (a start that failed).
func (f *procFiles) closeParent() {
	for _, p := range f.parent {
		p.Close()
	}
	for i, fd := range f.out {
		if f.pipes && fd >= 0 {
			syscall.Close(fd)
			f.out[i] = -1
		}
	}
	f.parent = nil
}

// newOutFile makes stream i's pipe read end an *os.File for readLoop.
func newOutFile(fd, i int) *os.File {
	return os.NewFile(uintptr(fd), "|"+string(streams[i]))
}

// startReaders starts a readLoop for each of files, files[i] being
// stream i's (nil: none), and makes them the run's rfiles.
func (j *Job) startReaders(files []*os.File) {
	j.run.rfiles = nil
	for _, f := range files {
		if f != nil {
			j.run.rfiles = append(j.run.rfiles, f)
		}
	}
	j.run.readersLeft.Store(int32(len(j.run.rfiles)))
	if len(j.run.rfiles) == 0 {
		close(j.run.readersDone) // (nothing to read)
		return
	}
	j.m.wg.Add(len(j.run.rfiles))
	done := j.run.readersDone
	for i, f := range files {
		if f != nil {
			j.m.runners.run(func() { j.readLoop(i, f, done) })
		}
	}
}

// closeChild closes our copies of the child's ends.
func (f *procFiles) closeChild() {
	for _, fd := range f.childFds {
		syscall.Close(fd)
	}
	for i, fd := range f.outW {
		if f.pipes && fd >= 0 {
			syscall.Close(fd)
			f.outW[i] = -1
		}
	}
	for _, c := range f.childFiles {
		c.Close()
	}
	f.childFds, f.childFiles = nil, nil
}

func (j *Job) prepare(argv, env []string) (*launch, procFiles, error) {
	files := noFiles(true)
	path, err := lookPath(argv[0], envLookup(env, "PATH"))
	if err != nil {
		return nil, files, err
	}
	if j.spec.Cwd != "" {
		fi, err := os.Stat(j.spec.Cwd)
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) { // (its message repeats the path: the first bytes do)
				err = pe.Err
			}
			return nil, files, fmt.Errorf("working directory %s: %w", quoteClip(j.spec.Cwd), err)
		}
		if !fi.IsDir() {
			return nil, files, fmt.Errorf("working directory %s is not a directory", quoteClip(j.spec.Cwd))
		}
	}
	// Rlimits and niceness: the child applies them to itself, then execs.
	if path, argv, err = j.wrapLimits(path, argv); err != nil {
		return nil, files, err
	}
	if j.spec.Pty != nil {
		return j.preparePTY(path, argv, env)
	}
	l := &launch{path: path, argv: argv, env: env, dir: j.spec.Cwd, sys: &syscall.SysProcAttr{Setpgid: true}}
	l.stdio[0] = j.m.devNullFd
	if j.spec.Stdin {
		w, r, err := childPipe()
		if err != nil {
			return nil, files, fmt.Errorf("create stdin pipe: %w", err)
		}
		files.childFds = append(files.childFds, r)
		j.mu.Lock()
		j.in.stdin = w
		j.mu.Unlock()
		l.stdio[0] = r
	}
	for i := 1; i <= 2; i++ {
		r, w, err := outputPipe()
		if err != nil {
			files.closeChild()
			files.closeParent()
			j.closeStdin()
			return nil, files, fmt.Errorf("create output pipe: %w", err)
		}
		files.out[i-1] = r
		files.outW[i-1] = w
		l.stdio[i] = w
	}
	return l, files, nil
}

// childPipe makes a pipe for a child's stdin and returns our end (the
// write end), non-blocking and in the netpoller so that writes can time
// out and be interrupted, and the child's end, a plain blocking
// descriptor (only handed to the child and closed: no *os.File, no poller
// registration).
func childPipe() (ours *os.File, child int, err error) {
	r, w, err := pipe(1)
	if err != nil {
		return nil, -1, err
	}
	return os.NewFile(uintptr(w), "|stdin"), r, nil
}

// outputPipe makes a pipe for a child's stdout or stderr: our end (the
// read end) a non-blocking plain descriptor, the child's a blocking one.
func outputPipe() (ours, child int, err error) {
	return pipe(0)
}

// pipe makes a pipe with end nb (0 read, 1 write) non-blocking.
func pipe(nb int) (r, w int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return -1, -1, fmt.Errorf("pipe: %w", err)
	}
	// Only O_NONBLOCK among the status flags F_SETFL changes is set on a
	// new pipe: no need to read them first.
	if _, err := unix.FcntlInt(uintptr(p[nb]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return -1, -1, fmt.Errorf("pipe: %w", err)
	}
	return p[0], p[1], nil
}

// openPTY opens a terminal pair. The master is non-blocking and in Go's
// netpoller, like a pipe's end: pty.Open leaves it in blocking mode
// (it calls Fd), where a write deadline never fires, so a write to a
// program that does not read its terminal blocked for good (holding the
// job's write lock, which kept the job from ever finishing).
func openPTY() (ptmx, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		if err = unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		tty.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}

// setWinsize sets the terminal's size through its master (without Fd,
// which would make it blocking again).
func setWinsize(ptmx *os.File, rows, cols uint16) error {
	rc, err := ptmx.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	}); err != nil {
		return err
	}
	return ioErr
}

// preparePTY sets up a terminal: the child gets the slave side as stdin,
// stdout and stderr, in a session of its own with it as controlling tty.
func (j *Job) preparePTY(path string, argv, env []string) (*launch, procFiles, error) {
	files := noFiles(false)
	ptmx, tty, err := openPTY()
	if err != nil {
		return nil, files, fmt.Errorf("open pty: %w", err)
	}
	rows, cols := uint16(j.spec.Pty.Rows), uint16(j.spec.Pty.Cols) // (1..10000 or 0: Validate)
	j.mu.Lock()
	if j.in.rows > 0 && j.in.cols > 0 {
		rows, cols = j.in.rows, j.in.cols // a service's next run: the size it was last given (resize)
	}
	j.mu.Unlock()
	if rows == 0 {
		rows = 24
	}
	if cols == 0 {
		cols = 80
	}
	if err := setWinsize(ptmx, rows, cols); err != nil {
		ptmx.Close()
		tty.Close()
		return nil, files, fmt.Errorf("size pty: %w", err)
	}
	// TERM: an explicit env entry wins, else pty.term, else xterm-256color
	// (over whatever the supervisor inherited).
	if _, explicit := j.spec.Env["TERM"]; !explicit {
		term := j.spec.Pty.Term
		if term == "" {
			term = "xterm-256color"
		}
		env = setEnv(env, "TERM", term)
	}
	j.mu.Lock() // the job is already visible to status and the journal
	j.in.isPTY, j.in.ptmx, j.in.rows, j.in.cols = true, ptmx, rows, cols
	j.mu.Unlock()
	files.childFiles = []*os.File{tty}
	files.parent = []*os.File{ptmx}
	fd := int(tty.Fd())
	l := &launch{path: path, argv: argv, env: env, dir: j.spec.Cwd, stdio: [3]int{fd, fd, fd},
		sys: &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}}
	return l, files, nil
}

// failSpawn ends the run whose process could not be started: a service's
// later run is restarted as its policy says (a binary being replaced, a
// full disk); anything else is finalized as a spawn-error.
func (j *Job) failSpawn(err error) {
	j.mu.Lock()
	j.errMsg = err.Error()
	j.endedAt = j.m.now()
	close(j.runStarted)
	close(j.runDone)
	sock := j.notify.sock
	j.notify.sock = nil
	// (the first start of a service reports its error: no restart)
	later := j.isService() && j.svc.attempt > 1
	var v lifecycle.Verdict
	var end runEnd
	if later {
		v, end = j.verdictLocked(protocol.ReasonSpawnError)
	}
	restarting := j.endRunLocked(j.stepLocked(lifecycle.RunEnded{SpawnFailed: true, Verdict: v}), end)
	j.mu.Unlock()
	closeNotify(sock)
	switch {
	case restarting:
		j.m.log.Warn("service run could not start; restarting", "job", j.id, "err", err)
	case later:
		j.m.log.Warn("service run could not start", "job", j.id, "err", err)
	default:
		j.m.log.Warn("job spawn failed", "job", j.id, "err", err)
	}
}
