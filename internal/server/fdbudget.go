package server

import (
	"log/slog"

	"golang.org/x/sys/unix"
)

// Descriptors a running supervisor holds, for the start-up check against
// RLIMIT_NOFILE (measured, see operations.md, Capacity).
const (
	// fdsPerJob is what a running job holds at most: its output pipes'
	// read and write ends, its pidfd, the epoll instance waiting on them,
	// its stdin's write end, its notify socket and its cgroup's
	// descriptor (measured: 7 plain, 8 with stdin, 9 with both).
	fdsPerJob = 9
	// fdsBase covers the rest: the pool of idle cgroups (up to 32), the
	// connections each socket keeps past --max-connections for our own
	// uid (zmtp.DefaultOwnReserve), and an idle supervisor's own (~15:
	// listeners, metrics server, journal, intents, lock, /dev/null, the
	// runtime's), with room to spare.
	fdsBase = 96
	// connsPerSlot is what one --max-connections slot can take on a
	// socket: an established connection, and as many in the handshake
	// (zmtp.Policy.MaxHandshakes defaults to MaxConns).
	connsPerSlot = 2
)

// checkFDBudget warns when cfg's limits can take more descriptors than
// this process may open (Go raises the soft RLIMIT_NOFILE to the hard one
// at start, so this is the hard one unless the runtime could not): past
// it, spawns fail with "too many open files" and connections are not
// accepted, which no start-up error would otherwise have foretold.
func checkFDBudget(cfg Config, log *slog.Logger) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return
	}
	// What cfg's limits can take at once: every connection open on both
	// sockets and on /metrics, and every job running.
	rest := fdsBase + 2*connsPerSlot*uint64(cfg.MaxConns)
	if cfg.MetricsAddr != "" {
		rest += uint64(cfg.MetricsMaxConns)
	}
	need := rest + uint64(cfg.Jobs.MaxJobs)*fdsPerJob
	if need <= rl.Cur {
		return
	}
	jobs := uint64(0) // (that fit beside every connection slot in use)
	if rl.Cur > rest {
		jobs = (rl.Cur - rest) / fdsPerJob
	}
	log.Warn("file descriptors may run out: raise this process's limit (systemd LimitNOFILE=, ulimit -n) or lower --max-jobs/--max-connections",
		"need", need, "limit", rl.Cur, "maxJobs", cfg.Jobs.MaxJobs, "maxConnections", cfg.MaxConns,
		"jobsThatFit", jobs)
}
