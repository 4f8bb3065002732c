package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/internal/proc"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// scrape fetches /metrics over HTTP and parses it with the Prometheus text parser.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of family name with the given label pairs
// ("k", "v", ...), or -1 when absent.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// TestMetricsAfterScriptedScenario: 3 normal exits, 1 overall timeout, 1
// no-output timeout, 1 manual cancel, 1 spawn error; every counter equals
// what happened.
func TestMetricsAfterScriptedScenario(t *testing.T) {
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	ts := startServer(t, cfg)
	addr := ts.MetricsAddr().String()
	ctx := ctxT(t, 30*time.Second)
	var ids []string
	spawn := func(a protocol.SpawnArgs) {
		j, err := ts.client.Spawn(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.JobID)
	}
	for i := 0; i < 3; i++ {
		spawn(protocol.SpawnArgs{Shell: fmt.Sprintf("echo job-%d; echo err >&2", i)})
	}
	spawn(protocol.SpawnArgs{Argv: []string{"sleep", "30"}, TimeoutMs: 100})
	spawn(protocol.SpawnArgs{Argv: []string{"sleep", "30"}, NoOutputTimeoutMs: 100})
	spawn(protocol.SpawnArgs{Shell: "trap '' TERM; echo up; while :; do sleep 0.05; done", GraceMs: 100})
	cancel := ids[len(ids)-1]
	if _, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"/nonexistent"}}); protocol.CodeOf(err) != protocol.CodeSpawnError {
		t.Fatalf("spawn error: %v", err)
	}
	// The cancelled job ignores SIGTERM: it needs the SIGKILL after the grace.
	waitOutput(t, ts, cancel)
	if _, err := ts.client.Kill(ctx, cancel, ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitDone(t, ts.client, id, 20*time.Second)
	}
	fams := scrape(t, addr)
	want := []struct {
		name   string
		labels []string
		v      float64
	}{
		{"exec_supervisor_jobs_spawned_total", nil, 6},
		{"exec_supervisor_jobs_finished_total", []string{"reason", "exit"}, 3},
		{"exec_supervisor_jobs_finished_total", []string{"reason", "overall-timeout"}, 1},
		{"exec_supervisor_jobs_finished_total", []string{"reason", "no-output-timeout"}, 1},
		{"exec_supervisor_jobs_finished_total", []string{"reason", "manual-cancel"}, 1},
		{"exec_supervisor_jobs_finished_total", []string{"reason", "spawn-error"}, 1},
		{"exec_supervisor_jobs_finished_total", []string{"reason", "signal"}, 0},
		{"exec_supervisor_job_timeouts_total", []string{"type", "overall"}, 1},
		{"exec_supervisor_job_timeouts_total", []string{"type", "no_output"}, 1},

		{"exec_supervisor_jobs_active", nil, 0},
		{"exec_supervisor_jobs_known", nil, 7},
		{"exec_supervisor_output_bytes_total", []string{"stream", "stderr"}, 12},
		{"exec_supervisor_events_dropped_total", nil, 0},
		{"exec_supervisor_control_requests_total", []string{"op", "spawn", "code", "ok"}, 6},
		{"exec_supervisor_control_requests_total", []string{"op", "spawn", "code", "spawn-error"}, 1},
		{"exec_supervisor_control_requests_total", []string{"op", "kill", "code", "ok"}, 1},
		{"exec_supervisor_control_request_duration_seconds", []string{"op", "spawn"}, 7},
		{"exec_supervisor_journal_write_failures_total", nil, 0},
		{"exec_supervisor_orphans_reconciled_total", nil, 0},
		{"exec_supervisor_held_waits", nil, 0},
		{"exec_supervisor_jobs_forgotten_total", nil, 0},
	}
	for _, w := range want {
		if got := value(fams, w.name, w.labels...); got != w.v {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.v)
		}
	}
	if got := value(fams, "exec_supervisor_cleanup_kills_total", "mode", "pgid") + value(fams, "exec_supervisor_cleanup_kills_total", "mode", "cgroup"); got != 1 {
		t.Errorf("cleanup kills (pgid + cgroup) = %v, want 1", got)
	}
	// stdout: "job-N\n" x3 + "up\n"
	if got := value(fams, "exec_supervisor_output_bytes_total", "stream", "stdout"); got != 3*6+3 {
		t.Errorf("stdout bytes %v", got)
	}
	if value(fams, "exec_supervisor_events_published_total", "kind", "job.started") < 6 {
		t.Errorf("job.started events not counted")
	}
	if value(fams, "exec_supervisor_journal_writes_total", nil...) < 1 || value(fams, "process_resident_memory_bytes") <= 0 || value(fams, "go_goroutines") <= 0 {
		t.Errorf("journal writes, process or Go collectors missing")
	}
}

func waitOutput(t *testing.T, ts *testServer, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := ts.client.Status(ctxT(t, 5*time.Second), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.OutputEnd > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no output")
		}
		time.Sleep(10 * time.Millisecond) // polling the job's state
	}
}

// TestRecoveredJobCountedFinished: a job that was running when its
// supervisor died ends at the next start, with reason supervisor-restart,
// and is counted among finished jobs like any other end (a metrics audit
// found that series pre-created at 0 and never moving).
func TestRecoveredJobCountedFinished(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	doc := &journal.File{InstanceID: "dead", Jobs: []journal.Record{
		{JobID: "j-gone", Shell: "true", Pid: 4194000, Pgid: 4194000, StartTicks: 1, BootID: proc.BootID(), State: "running"},
	}}
	if err := journal.New(cfg.JournalPath()).Save(doc); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, cfg)
	if v := value(scrape2(t, ts), "exec_supervisor_jobs_finished_total", "reason", "supervisor-restart"); v != 1 {
		t.Fatalf("finished with supervisor-restart: %v", v)
	}
}

// TestResumedServiceEventsInOrder: a service recovered in a later run
// whose history no longer has run 1 (the normal shape once the history is
// cut) and is resumed: subscribe returns its events in seq order, none of
// them also reported missing (the resumed run's job.started was taken for
// seq 1's and put first).
func TestResumedServiceEventsInOrder(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	spec := protocol.SpawnArgs{Argv: []string{"sleep", "300"}, Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways}}
	doc := &journal.File{InstanceID: "dead", Jobs: []journal.Record{{
		JobID: "j-svc", Argv: spec.Argv, Pid: 4194000, Pgid: 4194000, StartTicks: 1, BootID: proc.BootID(), State: "running", LastSeq: 5,
		Service: &journal.Service{Spec: spec, Attempt: 3, History: []protocol.RunRecord{{Attempt: 2, Pid: 4193999, Reason: protocol.ReasonExit}}},
	}}}
	if err := journal.New(cfg.JournalPath()).Save(doc); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, cfg)
	ctx := ctxT(t, 10*time.Second)
	defer ts.client.Kill(context.Background(), "j-svc", "SIGKILL")
	var res protocol.SubscribeResult
	eventually(t, 10*time.Second, "the service resumed", func() bool {
		var err error
		res, err = ts.client.Subscribe(ctx, "j-svc", 1, 0)
		return err == nil && len(res.Events) > 0 && res.Events[len(res.Events)-1].Kind == protocol.KindStarted
	})
	var last uint64
	for _, ev := range res.Events {
		if ev.Seq <= last {
			t.Fatalf("seq %d after %d: %+v", ev.Seq, last, res.Events)
		}
		last = ev.Seq
		for _, m := range res.Missing {
			if ev.Seq >= m.From && ev.Seq <= m.To {
				t.Fatalf("seq %d returned and reported missing (%+v)", ev.Seq, res.Missing)
			}
		}
	}
}

// TestServiceRunTimeoutsCounted: a service run ended by its timeout and
// restarted counts in job_timeouts_total like a one-shot job's timeout (a
// service whose runs kept timing out never showed there).
func TestServiceRunTimeoutsCounted(t *testing.T) {
	ts := startServer(t, testConfig(t))
	ctx := ctxT(t, 20*time.Second)
	// Three runs, all ended by their timeout; the last one gives up
	// (restart-limit): three timeouts, two restarts.
	j, err := ts.client.Spawn(ctx, protocol.SpawnArgs{Argv: []string{"sleep", "300"}, TimeoutMs: 50, GraceMs: 50,
		Restart: &protocol.RestartPolicy{Policy: protocol.RestartAlways, RestartDelayMs: 10, MaxRestarts: ptrInt(3)}})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.client.Kill(context.Background(), j.JobID, "SIGKILL")
	waitDone(t, ts.client, j.JobID, 15*time.Second)
	fams := scrape2(t, ts)
	if v := value(fams, "exec_supervisor_job_timeouts_total", "type", "overall"); v != 3 {
		t.Fatalf("timeouts %v, want 3 (the last run's too)", v)
	}
	if r := value(fams, "exec_supervisor_job_restarts_total"); r != 2 {
		t.Fatalf("restarts %v, want 2", r)
	}
	if f := value(fams, "exec_supervisor_jobs_finished_total", "reason", "restart-limit"); f != 1 {
		t.Fatalf("finished restart-limit %v", f)
	}
}

func ptrInt(v int) *int { return &v }
