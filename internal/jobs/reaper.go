package jobs

import (
	"errors"
	"io/fs"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// EnableSubreaper makes the supervisor a child subreaper: descendants of
// jobs that lose their parent are reparented to it rather than to init,
// stay attributable, and are reaped by the Manager (no zombies), without
// ever taking a job leader's exit status from its waiter. It must not be
// used in a process whose other children are waited for elsewhere.
func (m *Manager) EnableSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return err
	}
	m.reaping = true
	m.wg.Add(1)
	go m.reapLoop()
	return nil
}

// reapLoop reaps orphaned descendants on SIGCHLD (and every few seconds,
// for signals coalesced away). Every job's exit raises SIGCHLD too, so a
// pass is cheap (the supervisor's own children, not the process table)
// and passes are at least reapPause apart: an orphan's zombie may wait
// that long.
func (m *Manager) reapLoop() {
	defer m.wg.Done()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			m.reapOrphans()
			return
		case <-sig:
		case <-t.C:
		}
		m.reapOrphans()
		pause := time.NewTimer(reapPause)
		select {
		case <-m.stop:
			pause.Stop()
			m.reapOrphans()
			return
		case <-pause.C:
		}
	}
}

// reapPause is the least time between two reaping passes.
const reapPause = 20 * time.Millisecond

// reapOrphans reaps exited children that are not job leaders (those are
// reaped by their job's waiter). The candidates are found without a lock;
// the reaping itself holds the write lock, which excludes the window in
// which a new leader exists but is not yet registered.
func (m *Manager) reapOrphans() {
	var cands []int
	for _, pid := range ownChildren() {
		m.lmu.Lock()
		_, leader := m.leaders[pid]
		m.lmu.Unlock()
		if !leader {
			cands = append(cands, pid)
		}
	}
	if len(cands) == 0 {
		return
	}
	m.reapMu.Lock()
	defer m.reapMu.Unlock()
	for _, pid := range cands {
		m.lmu.Lock()
		_, leader := m.leaders[pid]
		m.lmu.Unlock()
		if leader {
			continue // registered meanwhile: its waiter reaps it
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && got == pid {
			m.reaped.Add(1)
		}
	}
}

// ownChildren lists the supervisor's child processes: from
// /proc/self/task/*/children (a few small files) where the kernel has
// them, else by scanning the process table.
func ownChildren() []int {
	var out []int
	tasks, err := os.ReadDir("/proc/self/task")
	if err == nil {
		ok := true
		buf := make([]byte, 0, 512)
		for _, t := range tasks {
			b, err := readProcFile("/proc/self/task/"+t.Name()+"/children", buf[:0])
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					if _, serr := os.Stat("/proc/self/task/" + t.Name()); serr == nil {
						ok = false // the kernel lacks CONFIG_PROC_CHILDREN
						break
					}
				}
				continue // the thread ended meanwhile
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					out = append(out, pid)
				}
			}
		}
		if ok {
			return out
		}
	}
	me := os.Getpid()
	out = out[:0]
	eachProc(func(p *procEntry) bool {
		if p.ppid == me {
			out = append(out, p.pid)
		}
		return true
	})
	return out
}

// readProcFile appends the contents of a small /proc file to buf: three
// system calls where os.ReadFile makes six (this runs after every job).
func readProcFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return buf, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return buf, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func (m *Manager) addLeader(pid int) {
	m.lmu.Lock()
	m.leaders[pid] = struct{}{}
	m.lmu.Unlock()
}

func (m *Manager) removeLeader(pid int) {
	m.lmu.Lock()
	delete(m.leaders, pid)
	m.lmu.Unlock()
}

// Reaped counts orphaned descendants reaped by the subreaper.
func (m *Manager) Reaped() uint64 { return m.reaped.Load() }
