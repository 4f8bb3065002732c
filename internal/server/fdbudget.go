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
	// its stdin's write end and its cgroup's descriptor.
	fdsPerJob = 8
	// fdsBase covers the rest: the sockets' listeners, the metrics
	// server and its scrapes, the journal, its intents, the lock, the
	// cgroup base, /dev/null, the runtime's own.
	fdsBase = 64
)

// fdNeed returns how many descriptors cfg's limits can take at once: every
// job running and every connection open on both sockets.
func fdNeed(cfg Config) uint64 {
	return uint64(cfg.Jobs.MaxJobs)*fdsPerJob + 2*uint64(cfg.MaxConns) + fdsBase
}

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
	need := fdNeed(cfg)
	if rl.Cur == unix.RLIM_INFINITY || need <= rl.Cur {
		return
	}
	jobs := uint64(0)
	if rl.Cur > fdsBase {
		jobs = (rl.Cur - fdsBase) / fdsPerJob
	}
	log.Warn("file descriptors may run out: raise this process's limit (systemd LimitNOFILE=, ulimit -n) or lower --max-jobs/--max-connections",
		"need", need, "limit", rl.Cur, "maxJobs", cfg.Jobs.MaxJobs, "maxConnections", cfg.MaxConns,
		"jobsThatFit", jobs)
}
