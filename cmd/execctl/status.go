package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// printKillResult prints the result of kill or stop.
func printKillResult(g *globals, id string, res protocol.KillResult) error {
	if g.json {
		return printJSON(g.stdout, res)
	}
	if res.AlreadyFinished {
		fmt.Fprintf(g.stdout, "%s had already ended (%s)\n", id, res.Job.Reason)
	} else {
		fmt.Fprintf(g.stdout, "%s %s\n", id, res.Job.State)
	}
	return nil
}

// StatusCommand shows one job, or all.
type StatusCommand struct{}

// Synopsis implements command.
func (*StatusCommand) Synopsis() string { return "show a job in detail (or all jobs): status [JOB]" }

// Run implements command.
func (*StatusCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("status", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return listJobs(ctx, g, protocol.ListJobsArgs{})
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	info, err := g.on(id).Status(ctx, id)
	if err != nil {
		return 0, err
	}
	if g.json {
		if g.pool != nil {
			return exitOK, printJSON(g.stdout, struct {
				Job any `json:"job"`
			}{g.jobJSON(info)})
		}
		return exitOK, printJSON(g.stdout, protocol.StatusResult{Job: &info})
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	row("job", info.JobID)
	if h := g.hostOf(info.JobID); h != "" {
		row("host", hostName(h))
	}
	if info.Name != "" {
		row("name", info.Name)
	}
	row("state", info.State)
	row("command", commandLine(info))
	if info.Cwd != "" {
		row("cwd", info.Cwd)
	}
	row("pid", info.Pid)
	if info.Ownership != "" {
		row("ownership", info.Ownership)
	}
	if info.Pty {
		t := fmt.Sprintf("pty %dx%d", info.Rows, info.Cols)
		if info.BracketedPaste {
			t += ", bracketed paste on"
		}
		row("terminal", t)
	}
	row("created", fmtTime(info.CreatedAt))
	row("started", fmtTime(info.StartedAt))
	if info.Finished() {
		row("ended", fmtTime(info.EndedAt))
		row("reason", info.Reason)
		if info.ExitCode != nil {
			row("exit code", *info.ExitCode)
		}
		if info.Signal != "" {
			row("signal", info.Signal)
		}
		if info.Error != "" {
			row("error", info.Error)
		}
	}
	row("runtime", runtime(info))
	serviceRows(row, info)
	if u := info.Usage; u != nil {
		row("usage", fmt.Sprintf("%d processes, RSS %s, CPU %s (%.0f%%)", u.Processes, humanBytes(u.RSSBytes), humanDuration(time.Duration(u.CPUSeconds*float64(time.Second))), u.CPUPercent))
	}
	row("output", fmt.Sprintf("%d bytes stdout, %d bytes stderr (retained from offset %d)", info.StdoutBytes, info.StderrBytes, info.RetainedFrom))
	if info.OutputDisk {
		row("output on disk", "yes: logs and poll read it from the supervisor's files after it left memory, until remove or --output-max-age")
	} else if info.OutputDiskError != "" {
		row("output on disk", "given up (memory only from then on): "+info.OutputDiskError)
	}
	if info.OutputHeld {
		row("output held", "not read until the supervisor's journal can be written (disk full? see its log); the job waits on its output")
	}
	if info.OutputPaced {
		row("output paced", "waiting for a client that paces it (spawn --follow, logs -f --pace) to take its output")
	}
	row("timeouts", fmt.Sprintf("overall %v, no-output %v", noneIfZero(info.TimeoutMs), noneIfZero(info.NoOutputTimeoutMs)))
	if len(info.Labels) > 0 {
		keys := make([]string, 0, len(info.Labels))
		for k := range info.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+"="+info.Labels[k])
		}
		row("labels", strings.Join(parts, " "))
	}
	return exitOK, tw.Flush()
}

func noneIfZero(ms int64) string {
	if ms == 0 {
		return "none"
	}
	return humanDuration(msDuration(ms))
}

func fmtTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05.000")
}

func runtime(j protocol.JobInfo) string {
	if j.StartedAt == 0 {
		return "-"
	}
	end := j.EndedAt
	if end == 0 {
		end = time.Now().UnixMilli()
	}
	return humanDuration(msDuration(end - j.StartedAt))
}

func commandLine(j protocol.JobInfo) string {
	s := j.Shell
	if s == "" {
		s = strings.Join(j.Argv, " ")
	}
	if s == "" {
		s = "-" // (list --brief)
	}
	// One line, whatever the command holds (a shell script's newlines
	// and tabs broke the table's rows and columns).
	s = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace(s)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// ListCommand lists jobs.
type ListCommand struct{}

// Synopsis implements command.
func (*ListCommand) Synopsis() string {
	return "list jobs: list [--state S] [--session ID] [--name PATTERN] [--label K=V]... [--brief]"
}

// Run implements command.
func (*ListCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("list", g)
	state := fs.String("state", "", "only jobs in this state (queued, starting, running, exiting, restarting, exited)")
	session := fs.String("session", "", "only jobs of this session")
	brief := fs.Bool("brief", false, "without the jobs' commands, cwd and labels (much less to transfer when commands are long)")
	name := fs.String("name", "", "only named jobs whose name matches this glob (* ? [...]; a plain name: the jobs of that name)")
	labels := fs.StringArray("label", nil, "K=V: only jobs with this label (repeatable: all must match)")
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	want, err := kvs(*labels, "--label")
	if err != nil {
		return 0, err
	}
	var pe *protocol.Error
	if err := protocol.ValidNamePattern(*name); errors.As(err, &pe) {
		return 0, &usageError{msg: "--name: " + pe.Message, hint: "a glob such as 'build-*' (quote it from the shell)"}
	}
	switch protocol.State(*state) {
	case "", protocol.StateQueued, protocol.StateStarting, protocol.StateRunning, protocol.StateExiting, protocol.StateRestarting, protocol.StateExited:
	default:
		return 0, &usageError{msg: fmt.Sprintf("--state %q: want queued, starting, running, exiting, restarting or exited", *state)}
	}
	return listJobs(ctx, g, protocol.ListJobsArgs{State: protocol.State(*state), SessionID: *session, Brief: *brief, Name: *name, Labels: want})
}

// listJobs lists every job a selects, page after page (a supervisor sends
// a long listing in pages of about protocol.MaxListBytes).
func listJobs(ctx context.Context, g *globals, a protocol.ListJobsArgs) (int, error) {
	var jobs []protocol.JobInfo
	var hosts []string // (with several supervisors: each job's)
	var err error
	if g.pool != nil {
		jobs, hosts, err = g.listPool(ctx, a)
	} else {
		jobs, err = g.client.ListJobs(ctx, a)
	}
	var pe *client.PartialError
	if err != nil && !errors.As(err, &pe) {
		return 0, err
	}
	// The supervisor filters; a supervisor older than the name and label
	// filters ignores them (unknown keys) and lists every job: filter
	// again here (brief replies carry no labels to filter by).
	drop := func(j protocol.JobInfo) bool {
		return !protocol.MatchName(a.Name, j.Name) || !a.Brief && !protocol.MatchLabels(a.Labels, j.Labels)
	}
	if hosts != nil {
		kept := 0
		for i, j := range jobs {
			if !drop(j) {
				jobs[kept], hosts[kept] = j, hosts[i]
				kept++
			}
		}
		jobs, hosts = jobs[:kept], hosts[:kept]
	} else {
		jobs = slices.DeleteFunc(jobs, drop)
	}
	if g.json {
		var res any = protocol.ListJobsResult{Jobs: jobs}
		if jobs == nil {
			res = protocol.ListJobsResult{Jobs: []protocol.JobInfo{}}
		}
		if g.pool != nil {
			list := make([]any, len(jobs))
			for i, j := range jobs {
				list[i] = hostJob{JobInfo: j, Host: hosts[i]}
			}
			res = struct {
				Jobs []any `json:"jobs"`
			}{list}
		}
		if err := printJSON(g.stdout, res); err != nil {
			return 0, err
		}
	} else if err := printJobTable(g, jobs, hosts); err != nil {
		return 0, err
	}
	if pe != nil {
		return g.hostsFailed(g.cmdName(), pe), nil
	}
	return exitOK, nil
}

// printJobTable prints jobs as an aligned table; with hosts (several
// supervisors: each job's), a HOST column after JOB.
func printJobTable(g *globals, jobs []protocol.JobInfo, hosts []string) error {
	tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	if hosts != nil {
		fmt.Fprintln(tw, "JOB\tHOST\tNAME\tSTATE\tPID\tRUNTIME\tCPU\tRSS\tREASON\tEXIT\tOUTPUT\tCOMMAND")
	} else {
		fmt.Fprintln(tw, "JOB\tNAME\tSTATE\tPID\tRUNTIME\tCPU\tRSS\tREASON\tEXIT\tOUTPUT\tCOMMAND")
	}
	for i, j := range jobs {
		exit := "-"
		if j.ExitCode != nil {
			exit = fmt.Sprint(*j.ExitCode)
		} else if j.Signal != "" {
			exit = j.Signal
		}
		reason := string(j.Reason)
		if reason == "" {
			reason = "-"
		}
		cpu, rss := "-", "-"
		if u := j.Usage; u != nil {
			cpu, rss = fmt.Sprintf("%.0f%%", u.CPUPercent), humanBytes(u.RSSBytes)
		}
		name := j.Name
		if name == "" {
			name = "-"
		}
		id := j.JobID
		if hosts != nil {
			id += "\t" + hostName(hosts[i])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, name, j.State, j.Pid, runtime(j), cpu, rss, reason, exit, humanBytes(j.StdoutBytes+j.StderrBytes), commandLine(j))
	}
	return tw.Flush()
}

// RemoveCommand forgets a finished job.
type RemoveCommand struct{}

// Synopsis implements command.
func (*RemoveCommand) Synopsis() string { return "forget a finished job: remove JOB" }

// Run implements command.
func (*RemoveCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("remove", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	id, err := g.oneJob(ctx, fs)
	if err != nil {
		return 0, err
	}
	// (the reply names the job removed by its id: a name of a job no
	// longer in memory is resolved by the supervisor, among its files)
	var res protocol.RemoveResult
	if err := g.on(id).Call(ctx, protocol.OpRemove, &protocol.JobArgs{JobID: id}, &res); err != nil {
		return 0, err
	}
	res.JobID = cmp.Or(res.JobID, id)
	if g.json {
		return exitOK, printJSON(g.stdout, res)
	}
	fmt.Fprintf(g.stdout, "%s removed\n", res.JobID)
	return exitOK, nil
}

// HealthCommand checks the supervisor.
type HealthCommand struct{}

// Synopsis implements command.
func (*HealthCommand) Synopsis() string { return "check that the supervisor answers" }

// Run implements command.
func (*HealthCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("health", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	if g.pool != nil {
		return healthPool(ctx, g)
	}
	h, err := g.client.Health(ctx)
	if err != nil {
		return 0, err
	}
	if g.json {
		return exitOK, printJSON(g.stdout, h)
	}
	return printHealth(g, h, ""), nil
}

// printHealth prints h (of host, with several supervisors) and returns
// its exit code: 1 if it is draining or its journal is failing.
func printHealth(g *globals, h protocol.HealthResult, host string) int {
	prefix := "" // (each line's: its host, with several)
	if host != "" {
		prefix = hostName(host) + ": "
	}
	line := func(format string, args ...any) {
		fmt.Fprintf(g.stdout, "%s"+format, append([]any{prefix}, args...)...)
	}
	status := "ok"
	if !h.OK {
		status = "draining"
	}
	line("%s: exec-supervisor %s (protocol %d), instance %s, pid %d, up %s, %d/%d jobs running, %d known\n",
		status, h.Version, h.Protocol, h.InstanceID, h.Pid, humanDuration(msDuration(h.UptimeMs)), h.ActiveJobs, h.MaxJobs, h.TotalJobs)
	if h.QueuedJobs > 0 {
		line("%d jobs queued for a slot\n", h.QueuedJobs)
	}
	if !h.Cgroups && h.CgroupsNote != "" {
		line("no cgroup per job (%s): process groups only\n", h.CgroupsNote)
	}
	if h.JournalError != "" {
		line("JOURNAL FAILING, %s: a crash now would be recovered from an older record of the jobs (see its log; disk full?)\n", h.JournalError)
	}
	if !h.OK || h.JournalError != "" {
		return exitFailed
	}
	return exitOK
}

// healthPool is health of every host: a line each (with --json, one
// object: {"hosts": [health with its host, ...]}), the hosts that did
// not answer on stderr. Exit code: 6 when some did not answer, else 1 if
// one is draining or its journal failing, else 0.
func healthPool(ctx context.Context, g *globals) (int, error) {
	hs, err := g.pool.Health(ctx)
	var pe *client.PartialError
	if err != nil && !errors.As(err, &pe) {
		return 0, err
	}
	code := exitOK
	type hostHealth struct {
		protocol.HealthResult
		Host string `json:"host"`
	}
	answered := []hostHealth{}
	for _, h := range hs {
		if h.Err != nil {
			continue
		}
		answered = append(answered, hostHealth{h.Health, h.Member})
		if !h.Health.OK || h.Health.JournalError != "" {
			code = exitFailed
		}
		if !g.json {
			printHealth(g, h.Health, h.Member)
		}
	}
	if g.json {
		if err := printJSON(g.stdout, struct {
			Hosts []hostHealth `json:"hosts"`
		}{answered}); err != nil {
			return 0, err
		}
	}
	if pe != nil {
		return g.hostsFailed("health", pe), nil
	}
	return code, nil
}
