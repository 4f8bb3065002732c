// Package metrics defines exec-supervisor's Prometheus metrics on a
// registry of its own (no global state). Names share the prefix
// exec_supervisor_, carry their unit, and are labelled only with bounded
// values (never a job id). docs/metrics.md is the reference.
package metrics

import (
	"net/http"
	"time"

	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

const ns = "exec_supervisor"

// RejectMetricsConns is the connections_rejected_total reason of a
// /metrics connection closed at once because --metrics-max-connections
// were open.
const RejectMetricsConns = "metrics-too-many-connections"

// Metrics holds every collector. The zero value is not usable: use New.
type Metrics struct {
	Registry *prometheus.Registry

	Spawned          prometheus.Counter
	Restarts         prometheus.Counter
	Finished         *prometheus.CounterVec // reason
	Timeouts         *prometheus.CounterVec // type: overall, no_output
	CleanupKills     *prometheus.CounterVec // mode: pgid
	OutputBytes      *prometheus.CounterVec // stream
	EventsPublished  *prometheus.CounterVec // kind
	BackfillReqs     prometheus.Counter
	BackfillEvents   prometheus.Counter
	Requests         *prometheus.CounterVec   // op, code
	RequestSeconds   *prometheus.HistogramVec // op
	ConnRejected     *prometheus.CounterVec   // reason
	SubDisconnects   prometheus.Counter
	OwnershipEscapes prometheus.Counter
	OutputHeld       prometheus.Gauge
	PaceStalls       prometheus.Counter
	// OutputDiskErrors and OutputDiskBytes: jobs' output on disk.
	OutputDiskErrors prometheus.Counter
	OutputDiskBytes  prometheus.Counter
}

// Gauges are read at scrape time from the running supervisor.
type Gauges struct {
	ActiveJobs, KnownJobs, RingBytes, QueueLength  func() float64
	EventsDropped, GapEvents                       func() float64
	JournalWrites, JournalFailures, JournalCorrupt func() float64
	IntentFailures                                 func() float64
	OrphansReconciled, OrphansReaped, OrphansEnded func() float64
	JobsForgotten                                  func() float64
	FinishedBytes                                  func() float64
	Subscribers                                    func() float64
	HeldWaits                                      func() float64
	PacedJobs                                      func() float64
	QueuedJobs                                     func() float64
	// CPUHome is the CPU the supervisor's threads are kept on (-1: none);
	// CPUHomeChanges counts placements by kind: pinned, moved, spread.
	CPUHome        func() float64
	CPUHomeChanges func(to string) float64
}

// New builds the collectors and registers them, with the Go and process
// collectors, on a fresh registry.
func New(g Gauges) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help})
	}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	m.Spawned = c("jobs_spawned_total", "Jobs whose process was started.")
	m.Restarts = c("job_restarts_total", "Runs of service jobs scheduled after a run ended (restart policy or the restart op).")
	m.Finished = cv("jobs_finished_total", "Jobs finished, by termination reason.", "reason")
	m.Timeouts = cv("job_timeouts_total", "Jobs terminated by a timeout, by type (overall, no_output).", "type")
	m.CleanupKills = cv("cleanup_kills_total", "Jobs whose processes needed SIGKILL after the grace period, by ownership mode (pgid, cgroup).", "mode")
	m.OutputBytes = cv("output_bytes_total", "Output bytes read from jobs, by stream.", "stream")
	m.EventsPublished = cv("events_published_total", "Events sent on the event socket, by kind.", "kind")
	m.BackfillReqs = c("backfill_requests_total", "subscribe (backfill) requests served.")
	m.BackfillEvents = c("backfill_events_total", "Events replayed by subscribe requests.")
	m.Requests = cv("control_requests_total", "Control requests, by op and result code (ok or an error code).", "op", "code")
	m.OwnershipEscapes = c("ownership_escapes_total", "Jobs whose processes left their process group or session (caught by the job's cgroup).")
	m.OutputHeld = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "jobs_output_held",
		Help: "Jobs whose output is not read because the journal has not been written for too long (disk full?): they block on their output until a write lands."})
	m.PaceStalls = c("pace_stalls_total", "Pacers let go for holding a job longer than --pace-stall-limit while taking none of its output (their follower then misses what leaves the ring: a gap).")
	m.OutputDiskErrors = c("output_disk_errors_total", "Jobs whose output on disk failed (a full disk, a write error, writes stalled) or could not be opened: each goes on with its output in memory only.")
	m.OutputDiskBytes = c("output_disk_bytes_total", "Bytes of jobs' output written to their files (framing included).")
	m.SubDisconnects = c("subscriber_disconnects_total", "Event subscribers gone, for any reason (cut off as too slow, closed, network).")
	m.ConnRejected = cv("connections_rejected_total", "Connections refused or cut off by the hardened transport (or by the /metrics listener: metrics-too-many-connections), by reason.", "reason")
	m.RequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "control_request_duration_seconds", Help: "Control request handling time, by op.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"op"})
	gf := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, f)
	}
	cf := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, f)
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.Spawned, m.Restarts, m.Finished, m.Timeouts, m.CleanupKills, m.OutputBytes, m.EventsPublished,
		m.BackfillReqs, m.BackfillEvents, m.Requests, m.RequestSeconds, m.ConnRejected, m.SubDisconnects, m.OwnershipEscapes, m.OutputHeld, m.PaceStalls, m.OutputDiskErrors, m.OutputDiskBytes,
		gf("jobs_active", "Jobs not yet exited.", g.ActiveJobs),
		gf("jobs_known", "Jobs known (running or finished within retention).", g.KnownJobs),
		gf("ring_buffer_bytes", "Memory held by all jobs' ring buffers: retained output, its event headers and ~128 bytes per event.", g.RingBytes),
		gf("finished_jobs_retained_bytes", "Bytes charged to --max-finished-output by the finished jobs retention holds: their output and what they keep of their spec (argv, shell, cwd, labels, errors).", g.FinishedBytes),
		gf("event_queue_length", "Events waiting for the event socket.", g.QueueLength),
		gf("event_subscribers", "Connections subscribed to the event socket.", g.Subscribers),
		gf("held_waits", "Replies held for waits (spawn with waitMs, the wait op).", g.HeldWaits),
		gf("jobs_queued", "Jobs spawned with queue waiting for a slot under --max-jobs.", g.QueuedJobs),
		gf("jobs_output_paced", "Jobs whose output waits for a client pacing them (the pace op) to take what they printed.", g.PacedJobs),
		cf("events_dropped_total", "Events dropped at the high water mark (each announced by a job.gap event).", g.EventsDropped),
		cf("gap_events_total", "job.gap events published.", g.GapEvents),
		cf("journal_writes_total", "Successful journal writes.", g.JournalWrites),
		cf("journal_write_failures_total", "Failed journal writes.", g.JournalFailures),
		cf("journal_corrupt_total", "Unusable journals moved aside at start.", g.JournalCorrupt),
		cf("journal_intent_failures_total", "Job starts whose intent record (the journal's append-only companion) could not be written.", g.IntentFailures),
		cf("orphans_reconciled_total", "Orphaned job process groups, job cgroups and marked processes (per job) of an earlier run terminated at start.", g.OrphansReconciled),
		cf("orphans_reaped_total", "Orphaned descendants of jobs reaped by the supervisor as child subreaper.", g.OrphansReaped),
		cf("orphans_ended_total", "Orphaned descendants of finished jobs (adopted as child subreaper, found by their job's mark; without cgroups) terminated.", g.OrphansEnded),
		gf("cpu_home", "CPU the supervisor's own threads are kept on while it is quiet; -1 while they are spread over every CPU (busy, crowded, or --cpu-home=false). Jobs always start with every CPU.", g.CPUHome),
		cf("jobs_forgotten_total", "Finished jobs forgotten before their retention period ended (--max-finished-jobs, --max-finished-output).", g.JobsForgotten),
	)
	for _, to := range []string{"pinned", "moved", "spread"} {
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "cpu_home_changes_total",
			Help:        "Placements of the supervisor's own threads: pinned to a home CPU (quiet), moved to a calmer one (home crowded), spread over every CPU (busy, crowded, stopping).",
			ConstLabels: prometheus.Labels{"to": to}}, func() float64 { return g.CPUHomeChanges(to) }))
	}
	// Pre-create the label values operators alert on, so they read 0, not absent.
	for _, r := range []protocol.Reason{protocol.ReasonExit, protocol.ReasonSignal, protocol.ReasonManualCancel,
		protocol.ReasonOverallTimeout, protocol.ReasonNoOutputTimeout, protocol.ReasonSpawnError,
		protocol.ReasonSupervisorRestart, protocol.ReasonShutdown, protocol.ReasonOwnershipEscape,
		protocol.ReasonRestartLimit, protocol.ReasonWatchdog, protocol.ReasonStopped} {
		m.Finished.WithLabelValues(string(r))
	}
	m.Timeouts.WithLabelValues("overall")
	m.Timeouts.WithLabelValues("no_output")
	m.CleanupKills.WithLabelValues("pgid")
	m.CleanupKills.WithLabelValues("cgroup")
	for _, r := range append(zmtp.RejectReasons(), RejectMetricsConns) {
		m.ConnRejected.WithLabelValues(r)
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// ObserveRequest counts one control request.
func (m *Metrics) ObserveRequest(op protocol.Op, code string, d time.Duration) {
	if !op.Known() {
		op = "unknown" // bounded label values only
	}
	m.Requests.WithLabelValues(string(op), code).Inc()
	m.RequestSeconds.WithLabelValues(string(op)).Observe(d.Seconds())
}
