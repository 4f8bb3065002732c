package jobs

import (
	"os"
	"os/signal"
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
// for signals coalesced away).
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
	}
}

// reapOrphans reaps zombie children that are not job leaders (those are
// reaped by their job's waiter). The write lock excludes the window in
// which a new leader exists but is not yet registered.
func (m *Manager) reapOrphans() {
	m.reapMu.Lock()
	defer m.reapMu.Unlock()
	me := os.Getpid()
	var zombies []int
	eachProc(func(p *procEntry) bool {
		if p.state == "Z" && p.ppid == me {
			zombies = append(zombies, p.pid)
		}
		return true
	})
	for _, pid := range zombies {
		m.lmu.Lock()
		_, leader := m.leaders[pid]
		m.lmu.Unlock()
		if leader {
			continue
		}
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err == nil && got == pid {
			m.reaped.Add(1)
		}
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
