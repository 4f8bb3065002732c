package server

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/exec-supervisor/exec-supervisor/internal/cpuhome"
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Config is the whole configuration of a supervisor. Build it with
// DefaultConfig, override from flags with BindFlags, and check it with
// Validate before starting anything.
type Config struct {
	// Control and Event are the ZeroMQ endpoints (tcp:// or ipc://).
	Control string
	Event   string
	// StateDir holds persistent state (created 0700 when missing).
	StateDir string
	// Journal is the journal file; empty means <StateDir>/journal.json.
	Journal string
	// JournalFlushInterval is the period of journal writes besides the
	// ones that follow every state change.
	JournalFlushInterval time.Duration
	// JournalMaxFinished bounds the finished jobs kept in the journal (the
	// most recent ones); running jobs are always kept.
	JournalMaxFinished int
	// JournalMaxBytes bounds the journal's size: the finished jobs' records
	// (newest first) fill what the running jobs' and services' leave of
	// it. Those are always written (records of running one-shot jobs cut
	// down, argv and cwd clipped, when they alone pass it), up to
	// journal.MaxFileBytes: a write past that is refused and the previous
	// journal kept.
	JournalMaxBytes int64
	// ShutdownMode is "terminate" (kill running jobs at shutdown) or
	// "wait" (let them finish, up to ShutdownTimeout, then terminate).
	ShutdownMode string
	// TokenFile holds the secret tcp clients authenticate with (ZMTP PLAIN
	// password); created 0600 on first start when missing. Empty means
	// <StateDir>/token.
	TokenFile string
	// InsecureTCP allows tcp endpoints without authentication.
	InsecureTCP bool
	// Curve requires ZMTP CURVE (RFC 26: encrypted, both ends
	// authenticated by key) from tcp clients instead of the PLAIN token
	// (peers TCPLoopbackUID admits may still use NULL or PLAIN).
	Curve bool
	// CurveKeyFile is the server's CURVE secret key (Z85, 0600), its
	// public key beside it as .pub; both created on first start. Empty
	// means <StateDir>/curve.key.
	CurveKeyFile string
	// CurveClientsFile lists the client public keys CURVE admits (Z85, one
	// per line), read again when it changes. Empty means
	// <StateDir>/curve-clients.
	CurveClientsFile string
	// TCPLoopbackUID admits tcp clients on loopback that run as our uid
	// or one of AllowUIDs without the token, told by the kernel from
	// their socket (zmtp.Policy.LoopbackUIDs); false requires the token
	// from every tcp client.
	TCPLoopbackUID bool
	// AllowUIDs and AllowGIDs may connect to ipc endpoints besides our uid.
	AllowUIDs, AllowGIDs []int
	// MaxConns bounds connections per socket; HandshakeTimeout and
	// WriteTimeout bound a peer's handshake and each write to it.
	MaxConns int
	// ReplyQueueBytes bounds the replies waiting to be written to all
	// control connections together; past it the connection with the most
	// is disconnected.
	ReplyQueueBytes int
	// IdleEvictAfter is how long a control connection must have been idle
	// (no request in flight, no held wait, no reply being written) to be
	// given up for a new connection at --max-connections; 0 means 10 s,
	// negative never. Not an operator setting (tests lower it).
	IdleEvictAfter time.Duration
	// SubscriberQueueBytes bounds the events waiting for one subscriber;
	// a subscriber that falls further behind is disconnected.
	SubscriberQueueBytes int
	HandshakeTimeout     time.Duration
	WriteTimeout         time.Duration
	// NoCgroups turns off the cgroup per job; CgroupParent is where job
	// cgroups go (empty: the supervisor's own cgroup).
	NoCgroups    bool
	CgroupParent string
	// ResumeServices starts again, after a restart, the service jobs the
	// previous supervisor run was supervising when it crashed or shut down.
	ResumeServices bool
	// LimitsHelper is the executable that applies a job's rlimits and
	// niceness before exec (the supervisor binary itself; its main calls
	// limits.MaybeRunHelper first). Empty: such jobs are refused. Not a flag.
	LimitsHelper string
	// Subreaper makes the supervisor reparent and reap its jobs' orphaned
	// descendants. Off only in processes that wait for other children.
	Subreaper bool
	// CPUHome keeps the supervisor's own threads on one CPU while it is
	// quiet (internal/cpuhome); jobs always start with every CPU the
	// process may use. Placement is per process: tests that run several
	// servers in one process turn it off.
	CPUHome bool
	// CPUHomeTuning tunes CPUHome's controller (zero: its defaults). Not
	// an operator setting: tests make it decide fast.
	CPUHomeTuning cpuhome.Config
	// MetricsAddr is the HTTP address of /metrics; empty disables it.
	MetricsAddr string
	// MetricsMaxConns bounds the connections open to /metrics at once;
	// one more is closed as soon as it is accepted.
	MetricsMaxConns int
	// MetricsIdleTimeout is how long a keep-alive /metrics connection may
	// wait for its next request; 0 means 5 s. Not an operator setting
	// (tests lower it).
	MetricsIdleTimeout time.Duration
	// Jobs configures the job manager (Jobs.OutputDisk: which jobs keep
	// their output on disk by default).
	Jobs jobs.Config
	// OutputDir holds jobs' output on disk; empty means <StateDir>/output.
	// OutputSegmentBytes and OutputMaxBytes size a job's segment files
	// and bound them together; OutputMaxAge removes the files of jobs no
	// longer in memory that long after their last write (0: never).
	OutputDir          string
	OutputSegmentBytes int64
	OutputMaxBytes     int64
	OutputMaxAge       time.Duration
	// OutputSweepInterval is the period of the age sweep (0: a eighth of
	// OutputMaxAge, at most 10 min); OutputStallLimit how long a job's
	// disk writes may lag before it is given up (0: 10 s). Not operator
	// settings (tests lower them).
	OutputSweepInterval time.Duration
	OutputStallLimit    time.Duration
	// EventHWM bounds the queue of events waiting for the event socket.
	EventHWM int
	// EventsQueuedOnly sends every event through that queue, even when
	// nothing waits in it (normally such an event goes to the socket at
	// once). Not an operator setting: tests that must see the queue
	// overflow set it.
	EventsQueuedOnly bool
	// MaxHeldReplies and MaxPeerHeldReplies bound the replies held for
	// waits (spawn's waitMs, op wait) in all and per connection; 0 means
	// 10000 and 1000. Not operator settings (tests lower them).
	MaxHeldReplies, MaxPeerHeldReplies int
	// ListPageBytes is about the most one list-jobs reply carries; 0 (or
	// more than protocol.MaxListBytes) means protocol.MaxListBytes. Not an
	// operator setting (tests lower it to see listings paged).
	ListPageBytes int
	// NotifySocket is the service manager's notify socket ($NOTIFY_SOCKET
	// under systemd's Type=notify: READY=1, STOPPING=1, WATCHDOG=1); ""
	// means none. WatchdogInterval is its watchdog's period
	// ($WATCHDOG_USEC), 0 for none. Not flags: cmd/exec-supervisor takes
	// them from the environment.
	NotifySocket     string
	WatchdogInterval time.Duration
	// HeartbeatInterval is the period of supervisor.heartbeat events.
	HeartbeatInterval time.Duration
	// MaxRequestBytes bounds one control request.
	MaxRequestBytes int
	// MaxInFlight bounds control requests being handled at once.
	MaxInFlight int
	// ShutdownTimeout bounds the whole graceful shutdown.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error; LogFormat is text or json.
	LogLevel  string
	LogFormat string
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Control:              zmtp.DefaultControl(),
		Event:                zmtp.DefaultEvent(),
		StateDir:             defaultStateDir(),
		MetricsAddr:          "127.0.0.1:18792",
		MetricsMaxConns:      64,
		Jobs:                 jobs.DefaultConfig(),
		OutputSegmentBytes:   8 << 20,
		OutputMaxBytes:       64 << 20,
		OutputMaxAge:         7 * 24 * time.Hour,
		EventHWM:             1000,
		HeartbeatInterval:    time.Second,
		MaxRequestBytes:      protocol.MaxRequestBytes,
		MaxInFlight:          64,
		ShutdownTimeout:      15 * time.Second,
		JournalFlushInterval: 5 * time.Second,
		JournalMaxFinished:   1000,
		JournalMaxBytes:      16 << 20,
		MaxConns:             1024,
		Subreaper:            true,
		CPUHome:              true,
		ResumeServices:       true,
		SubscriberQueueBytes: 8 << 20,
		ReplyQueueBytes:      256 << 20,
		HandshakeTimeout:     5 * time.Second,
		WriteTimeout:         5 * time.Second,
		ShutdownMode:         "terminate",
		TCPLoopbackUID:       true,
		LogLevel:             "info",
		LogFormat:            "text",
	}
}

func defaultStateDir() string { return statedir.Default() }

// TokenPath returns the effective token file path.
func (c *Config) TokenPath() string {
	if c.TokenFile != "" {
		return c.TokenFile
	}
	return filepath.Join(c.StateDir, "token")
}

// CurveKeyPath returns the effective CURVE secret key file path.
func (c *Config) CurveKeyPath() string {
	if c.CurveKeyFile != "" {
		return c.CurveKeyFile
	}
	return filepath.Join(c.StateDir, "curve.key")
}

// CurveClientsPath returns the effective CURVE allow-list path.
func (c *Config) CurveClientsPath() string {
	if c.CurveClientsFile != "" {
		return c.CurveClientsFile
	}
	return filepath.Join(c.StateDir, "curve-clients")
}

// usesTCP reports whether an endpoint is tcp.
func (c *Config) usesTCP() bool {
	return strings.HasPrefix(c.Control, "tcp://") || strings.HasPrefix(c.Event, "tcp://")
}

// BindFlags registers every option on fs, with c's current values as defaults.
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Control, "control", c.Control, "control endpoint (request/reply), tcp://HOST:PORT or ipc:///path")
	fs.StringVar(&c.Event, "event", c.Event, "event endpoint (PUB), tcp://HOST:PORT or ipc:///path")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "directory for persistent state")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", c.MetricsAddr, "HTTP address serving /metrics (empty disables)")
	fs.IntVar(&c.MetricsMaxConns, "metrics-max-connections", c.MetricsMaxConns, "connections open to /metrics at once; one more is closed at once (idle keep-alive connections are closed after 5s)")
	fs.IntVar(&c.Jobs.MaxJobs, "max-jobs", c.Jobs.MaxJobs, "maximum concurrent jobs")
	fs.IntVar(&c.Jobs.MaxQueued, "max-queued", c.Jobs.MaxQueued, "jobs spawned with queue that may wait for a slot under --max-jobs")
	fs.IntVar(&c.Jobs.RingBytes, "ring-buffer", c.Jobs.RingBytes, "output bytes retained per job")
	fs.DurationVar(&c.Jobs.MergeInterval, "chunk-merge-interval", c.Jobs.MergeInterval, "output batching window (0 sends every read at once)")
	fs.IntVar(&c.Jobs.MergeMaxBytes, "chunk-max-bytes", c.Jobs.MergeMaxBytes, "largest output event; pending output is flushed at this size")
	fs.DurationVar(&c.Jobs.DefaultTimeout, "default-timeout", c.Jobs.DefaultTimeout, "overall timeout of jobs that set none")
	fs.DurationVar(&c.Jobs.Grace, "grace", c.Jobs.Grace, "delay between SIGTERM and SIGKILL when terminating a job")
	fs.DurationVar(&c.Jobs.Retention, "finished-job-retention", c.Jobs.Retention, "how long finished jobs stay queryable")
	fs.DurationVar(&c.Jobs.CleanupInterval, "cleanup-interval", c.Jobs.CleanupInterval, "period of the finished-job sweep")
	fs.IntVar(&c.Jobs.MaxFinished, "max-finished-jobs", c.Jobs.MaxFinished, "most finished jobs retained; past it the oldest are forgotten before --finished-job-retention ends")
	fs.IntVar(&c.Jobs.MaxFinishedServices, "max-finished-services", c.Jobs.MaxFinishedServices, "most services kept once their supervision ended (restart-limit, stopped, killed...), which retention does not forget; past it those that ended longest ago are forgotten")
	fs.Int64Var(&c.Jobs.MaxFinishedOutput, "max-finished-output", c.Jobs.MaxFinishedOutput, "most bytes retained by finished jobs: their output and their argv, shell, cwd, labels and errors; past it the oldest jobs are forgotten before --finished-job-retention ends")
	fs.DurationVar(&c.Jobs.PaceStallLimit, "pace-stall-limit", c.Jobs.PaceStallLimit, "a client pacing a job (spawn --follow, the pace op) that takes none of its output for this long while the job waits for it is let go: the job runs on (0: never)")
	fs.StringVar(&c.OutputDir, "output-dir", c.OutputDir, "directory for jobs' output on disk, one directory per job (default: <state-dir>/output; made 0700)")
	fs.StringVar(&c.Jobs.OutputDisk, "output-disk", c.Jobs.OutputDisk, "which jobs keep their output on disk when their spawn does not say (output: disk|memory): services (jobs with a restart policy), all, none")
	fs.Int64Var(&c.OutputSegmentBytes, "output-segment-bytes", c.OutputSegmentBytes, "size of a job's output segment files; a full one is closed and a new one started")
	fs.Int64Var(&c.OutputMaxBytes, "output-max-bytes", c.OutputMaxBytes, "bound on a job's output files together: the oldest segments are deleted to stay under it (at least 2 x --output-segment-bytes)")
	fs.DurationVar(&c.OutputMaxAge, "output-max-age", c.OutputMaxAge, "remove the output files of jobs no longer in memory this long after their last write (0: never); remove deletes them at once")
	fs.IntVar(&c.EventHWM, "event-hwm", c.EventHWM, "events queued toward the event socket before the oldest are dropped (with job.gap events)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "period of supervisor.heartbeat events")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "largest control request accepted")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on graceful shutdown")
	fs.StringVar(&c.ShutdownMode, "shutdown", c.ShutdownMode, "at shutdown, terminate running jobs, or wait for them (up to --shutdown-timeout)")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "secret for tcp clients (ZMTP PLAIN password), created 0600 if missing (default: <state-dir>/token)")
	fs.BoolVar(&c.InsecureTCP, "insecure-tcp-no-auth", c.InsecureTCP, "DANGEROUS: accept tcp clients without authentication (anyone who reaches the port can run commands as this user)")
	fs.BoolVar(&c.Curve, "curve", c.Curve, "require ZMTP CURVE (encrypted, clients and server authenticated by key) on tcp endpoints instead of the PLAIN token")
	fs.StringVar(&c.CurveKeyFile, "curve-key-file", c.CurveKeyFile, "the supervisor's CURVE secret key (Z85), created 0600 if missing, its public key beside it as .pub (default: <state-dir>/curve.key)")
	fs.StringVar(&c.CurveClientsFile, "curve-clients", c.CurveClientsFile, "client public keys CURVE admits (Z85, one per line, # comments), read again when it changes (default: <state-dir>/curve-clients)")
	fs.BoolVar(&c.TCPLoopbackUID, "tcp-loopback-uid", c.TCPLoopbackUID, "admit tcp clients on loopback that run as our uid (or an --allow-uid) without the token, told by the kernel from their socket; false: the token is required from every tcp client")
	fs.IntSliceVar(&c.AllowUIDs, "allow-uid", c.AllowUIDs, "also accept ipc clients with this uid, and tcp clients on loopback with it (see --tcp-loopback-uid) (repeatable; opens the ipc sockets to them)")
	fs.IntSliceVar(&c.AllowGIDs, "allow-gid", c.AllowGIDs, "also accept ipc clients in this group, primary or supplementary (repeatable; opens the ipc sockets to them)")
	fs.IntVar(&c.MaxConns, "max-connections", c.MaxConns, "concurrent connections per socket")
	fs.IntVar(&c.ReplyQueueBytes, "reply-queue-bytes", c.ReplyQueueBytes, "replies waiting to be written to all control connections together; past it the connection with the most is disconnected")
	fs.IntVar(&c.SubscriberQueueBytes, "subscriber-queue-bytes", c.SubscriberQueueBytes, "events waiting for one subscriber before it is disconnected as too slow")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", c.HandshakeTimeout, "a peer must finish the ZMTP handshake within this")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", c.WriteTimeout, "a peer that does not read for this long is disconnected")
	fs.BoolVar(&c.NoCgroups, "no-cgroups", c.NoCgroups, "do not give jobs a cgroup each (process groups only; daemonizing children can then escape)")
	fs.BoolVar(&c.ResumeServices, "resume-services", c.ResumeServices, "after a restart, start again the service jobs (restart policy) the previous run was supervising when it crashed or shut down")
	fs.BoolVar(&c.Subreaper, "subreaper", c.Subreaper, "become a child subreaper: jobs' orphaned descendants are reparented to the supervisor and reaped (no zombies)")
	fs.BoolVar(&c.CPUHome, "cpu-home", c.CPUHome, "keep the supervisor's own threads on one CPU while it is quiet, spread them when it is busy (lower latency per spawn; jobs always start with every CPU)")
	fs.StringVar(&c.CgroupParent, "cgroup-parent", c.CgroupParent, "cgroup v2 directory for job cgroups, e.g. a systemd Delegate=yes slice (default: the supervisor's own cgroup)")
	fs.StringVar(&c.Journal, "journal", c.Journal, "journal file (default: <state-dir>/journal.json)")
	fs.IntVar(&c.JournalMaxFinished, "journal-max-finished", c.JournalMaxFinished, "most recently finished jobs kept in the journal (running jobs are always kept)")
	fs.Int64Var(&c.JournalMaxBytes, "journal-max-bytes", c.JournalMaxBytes, "bound on the journal's size: the most recently finished jobs are kept in it as far as it allows (running jobs and services are always kept)")
	fs.DurationVar(&c.JournalFlushInterval, "journal-flush-interval", c.JournalFlushInterval, "period of journal writes (it is also written after every state change)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: text or json")
}

// sameEndpoint reports whether endpoints a and b name one socket (ipc
// paths compared cleaned: ipc:///x//c.sock is ipc:///x/c.sock).
func sameEndpoint(a, b string) bool {
	sa, pa, errA := zmtp.Split(a)
	sb, pb, errB := zmtp.Split(b)
	if errA != nil || errB != nil || sa != sb {
		return a == b
	}
	if sa == "ipc" && !strings.HasPrefix(pa, "@") {
		return filepath.Clean(pa) == filepath.Clean(pb)
	}
	return pa == pb
}

// Validate checks every option and names the flag of the first bad one.
func (c *Config) Validate() error {
	if _, _, err := zmtp.Split(c.Control); err != nil {
		return fmt.Errorf("--control: %w", err)
	}
	if _, _, err := zmtp.Split(c.Event); err != nil {
		return fmt.Errorf("--event: %w", err)
	}
	if sameEndpoint(c.Control, c.Event) {
		return fmt.Errorf("--control and --event are both %s; they must differ", c.Control)
	}
	if c.MetricsAddr != "" {
		host, port, err := net.SplitHostPort(c.MetricsAddr)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 || strings.ContainsAny(host, "/ ") {
			return fmt.Errorf("--metrics-addr %q: want HOST:PORT (e.g. 127.0.0.1:18792; port 0 picks a free one, logged at start) or empty to disable", c.MetricsAddr)
		}
	}
	checks := []struct {
		ok   bool
		flag string
		msg  string
	}{
		{c.Jobs.MaxJobs >= 1 && c.Jobs.MaxJobs <= 100000, "--max-jobs", "must be 1..100000"},
		{c.Jobs.MaxQueued >= 1 && c.Jobs.MaxQueued <= 1000000, "--max-queued", "must be 1..1000000"},
		{c.Jobs.RingBytes >= 4096 && c.Jobs.RingBytes <= 1<<30, "--ring-buffer", "must be 4096..1073741824 bytes"},
		{c.Jobs.MergeInterval >= 0 && c.Jobs.MergeInterval <= time.Minute, "--chunk-merge-interval", "must be 0..1m"},
		{c.Jobs.MergeMaxBytes >= 512 && c.Jobs.MergeMaxBytes <= 1<<20, "--chunk-max-bytes", "must be 512..1048576"},
		{c.Jobs.MergeMaxBytes <= c.Jobs.RingBytes, "--chunk-max-bytes", "must not exceed --ring-buffer"},
		{c.Jobs.DefaultTimeout > 0 && c.Jobs.DefaultTimeout <= time.Duration(protocol.MaxTimeoutMs)*time.Millisecond, "--default-timeout", "must be > 0 and at most 168h"},
		{c.Jobs.Grace > 0 && c.Jobs.Grace <= 10*time.Minute, "--grace", "must be > 0 and at most 10m"},
		{c.Jobs.Retention > 0, "--finished-job-retention", "must be > 0"},
		{c.Jobs.MaxFinished >= 1 && c.Jobs.MaxFinished <= 10000000, "--max-finished-jobs", "must be 1..10000000"},
		{c.Jobs.MaxFinishedOutput >= 1<<20, "--max-finished-output", "must be >= 1048576 bytes"},
		{c.Jobs.MaxFinishedServices >= 1 && c.Jobs.MaxFinishedServices <= 1000000, "--max-finished-services", "must be 1..1000000"},
		{c.Jobs.CleanupInterval >= 100*time.Millisecond, "--cleanup-interval", "must be >= 100ms (a sweep walks every job)"},
		{c.Jobs.PaceStallLimit >= 0 && c.Jobs.PaceStallLimit <= 24*time.Hour, "--pace-stall-limit", "must be 0 (never) ..24h"},
		{c.EventHWM >= 1 && c.EventHWM <= 10000000, "--event-hwm", "must be 1..10000000"},
		{c.HeartbeatInterval >= 10*time.Millisecond && c.HeartbeatInterval <= time.Hour, "--heartbeat-interval", "must be 10ms..1h"},
		{c.MaxRequestBytes >= 1024 && c.MaxRequestBytes <= protocol.MaxRequestBytes, "--max-request-bytes", fmt.Sprintf("must be 1024..%d", protocol.MaxRequestBytes)},
		{c.MaxInFlight >= 1, "max in-flight requests", "must be >= 1"},
		{c.ShutdownTimeout > 0, "--shutdown-timeout", "must be > 0"},
		{c.MaxConns >= 1 && c.MaxConns <= 100000, "--max-connections", "must be 1..100000"},
		{c.MetricsMaxConns >= 1 && c.MetricsMaxConns <= 10000, "--metrics-max-connections", "must be 1..10000"},
		{c.MetricsIdleTimeout >= 0, "metrics idle timeout", "must be >= 0"},
		{c.ReplyQueueBytes >= 96<<20 && c.ReplyQueueBytes <= 1<<34, "--reply-queue-bytes", "must be 100663296..17179869184 (a reply may be 64 MiB)"},
		{c.SubscriberQueueBytes >= 64<<10 && c.SubscriberQueueBytes <= 1<<30, "--subscriber-queue-bytes", "must be 65536..1073741824"},
		{c.HandshakeTimeout >= 10*time.Millisecond && c.HandshakeTimeout <= time.Minute, "--handshake-timeout", "must be 10ms..1m"},
		{c.WriteTimeout >= 10*time.Millisecond && c.WriteTimeout <= time.Minute, "--write-timeout", "must be 10ms..1m"},
		{c.JournalMaxFinished >= 0 && c.JournalMaxFinished <= 1000000, "--journal-max-finished", "must be 0..1000000"},
		{c.JournalMaxBytes >= 64<<10 && c.JournalMaxBytes <= journal.MaxFileBytes/2, "--journal-max-bytes", fmt.Sprintf("must be 65536..%d (half of what a journal may be when read back)", journal.MaxFileBytes/2)},
		{c.JournalFlushInterval >= 10*time.Millisecond && c.JournalFlushInterval <= time.Hour, "--journal-flush-interval", "must be 10ms..1h"},
		{c.ShutdownMode == "terminate" || c.ShutdownMode == "wait", "--shutdown", "must be terminate or wait"},
		{c.Jobs.OutputDisk == "" || c.Jobs.OutputDisk == jobs.OutputDiskServices || c.Jobs.OutputDisk == jobs.OutputDiskAll || c.Jobs.OutputDisk == jobs.OutputDiskNone, "--output-disk", "must be services, all or none"},
		{c.OutputSegmentBytes >= 64<<10 && c.OutputSegmentBytes <= 1<<30, "--output-segment-bytes", "must be 65536..1073741824"},
		{c.OutputMaxBytes >= 2*c.OutputSegmentBytes && c.OutputMaxBytes <= 1<<40, "--output-max-bytes", "must be at least twice --output-segment-bytes (and at most 1 TiB)"},
		{c.OutputMaxAge >= 0, "--output-max-age", "must be >= 0 (0: never)"},
	}
	for _, ch := range checks {
		if !ch.ok {
			return fmt.Errorf("%s %s", ch.flag, ch.msg)
		}
	}
	for _, a := range []struct {
		flag string
		ids  []int
	}{{"--allow-uid", c.AllowUIDs}, {"--allow-gid", c.AllowGIDs}} {
		for _, id := range a.ids {
			if id < 0 || id >= 1<<32-1 { // ((uid_t)-1 is "no id")
				return fmt.Errorf("%s %d: must be 0..4294967294", a.flag, id)
			}
		}
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	if c.StateDir == "" {
		return fmt.Errorf("--state-dir must not be empty")
	}
	if c.Curve && c.InsecureTCP {
		return fmt.Errorf("--curve and --insecure-tcp-no-auth contradict each other: choose one")
	}
	if c.Journal != "" && strings.HasSuffix(c.Journal, "/") {
		return fmt.Errorf("--journal %q is a directory; give a file path", c.Journal)
	}
	return nil
}

// OutputPath returns the effective directory of jobs' output on disk.
func (c *Config) OutputPath() string {
	if c.OutputDir != "" {
		return c.OutputDir
	}
	return filepath.Join(c.StateDir, "output")
}

// JournalPath returns the effective journal path.
func (c *Config) JournalPath() string {
	if c.Journal != "" {
		return c.Journal
	}
	return filepath.Join(c.StateDir, "journal.json")
}
