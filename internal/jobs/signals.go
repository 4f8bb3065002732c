package jobs

import (
	"os"
	"os/signal"
	"syscall"
)

// defaultSignals are the signals a job must start with at their default
// action. A signal this process ignores is passed on as ignored through
// fork and exec: a supervisor started under nohup (SIGHUP), or a gateway
// that ignores SIGTERM running jobs in origin mode, would start jobs that
// the kill path's SIGTERM does not touch (they waited out the grace period
// for SIGKILL), and pipelines that ignore SIGPIPE. A handled signal is
// reset to its default at exec.
func defaultSignals() []os.Signal {
	return []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGPIPE,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGCHLD, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU}
}

// unignoreSignals turns every default signal this process ignores into one
// it handles by dropping it (so the process still does not react to it)
// until the manager stops: its jobs then start with the default action.
func (m *Manager) unignoreSignals() {
	var ignored []os.Signal
	for _, sig := range defaultSignals() {
		if signal.Ignored(sig) {
			ignored = append(ignored, sig)
		}
	}
	if len(ignored) == 0 {
		return
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, ignored...)
	m.log.Info("signals ignored by this process are now received and dropped, so that jobs start with their default action", "signals", ignored)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer signal.Stop(ch) // (back to ignored)
		for {
			select {
			case <-ch:
			case <-m.stop:
				return
			}
		}
	}()
}
