package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/exec-supervisor/exec-supervisor/internal/statedir"
	"github.com/exec-supervisor/exec-supervisor/internal/zmtp"
	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Several supervisors (hosts): --control and --event take comma lists,
// paired by position, or --endpoints-file names a file of them. execctl
// then talks through a client.Pool: list, status, top, health and logs
// ask every host (a HOST column, a "host" field in JSON); an op on a job
// goes to the job's host, found by the Pool (its id's tag, or asking
// each); spawn is placed by the Pool. One endpoint (a list of one) is
// execctl as it always was, output unchanged.

const (
	// maxHosts bounds the supervisors one execctl talks to (each holds
	// two connections or more).
	maxHosts = 256
	// maxEndpointsFile bounds the endpoints file.
	maxEndpointsFile = 1 << 20
)

// hostList is where execctl's endpoints come from, and what they are:
// one supervisor (multi false: g.client) or several (the Pool's members).
type hostList struct {
	members []client.PoolMember
	multi   bool
}

// changed reports whether the global flag name was given on the command
// line (before the command or after it), not taken from its variable.
func (g *globals) changed(name string) bool {
	return g.flags != nil && g.flags.Changed(name) || g.cmdFlags != nil && g.cmdFlags.Changed(name)
}

// hosts reads the endpoints from the flags (or their variables): a comma
// list in --control and --event, or --endpoints-file. A flag given on the
// command line wins over a variable; both of one kind are refused.
func (g *globals) hosts() (hostList, error) {
	file := g.endpointsFile
	fileFlag, listFlag := g.changed("endpoints-file"), g.changed("control") || g.changed("event")
	if file != "" {
		switch {
		case fileFlag && listFlag:
			return hostList{}, &usageError{msg: "give --control/--event or --endpoints-file, not both"}
		case !fileFlag && listFlag:
			file = "" // (the variable's file gives way to the flags)
		case !fileFlag && (g.control != "" || g.event != ""):
			return hostList{}, &usageError{msg: "EXEC_SUPERVISOR_ENDPOINTS_FILE and EXEC_SUPERVISOR_CONTROL/EXEC_SUPERVISOR_EVENT are both set",
				hint: "unset one, or choose on the command line (--endpoints-file, or --control/--event)"}
		}
	}
	if file != "" {
		ms, err := readEndpointsFile(file)
		if err != nil {
			return hostList{}, &usageError{msg: "--endpoints-file: " + err.Error(), hint: endpointsFileHint}
		}
		return hostList{members: ms, multi: true}, nil
	}
	ctl, err := splitEndpoints("--control", g.control)
	if err != nil {
		return hostList{}, err
	}
	evt, err := splitEndpoints("--event", g.event)
	if err != nil {
		return hostList{}, err
	}
	if len(ctl) <= 1 && len(evt) <= 1 {
		return hostList{members: []client.PoolMember{{Control: g.control, Event: g.event}}}, nil
	}
	if len(ctl) != len(evt) {
		return hostList{}, &usageError{msg: fmt.Sprintf("%d control endpoints and %d event endpoints: give one event endpoint per control endpoint, in the same order", len(ctl), len(evt)),
			hint: "execctl --control tcp://a:18790,tcp://b:18790 --event tcp://a:18791,tcp://b:18791 list (or --endpoints-file)"}
	}
	ms := make([]client.PoolMember, len(ctl))
	for i := range ctl {
		ms[i] = client.PoolMember{Control: ctl[i], Event: evt[i]}
	}
	if err := checkMembers(ms, func(i int) string { return fmt.Sprintf("entry %d", i+1) }); err != nil {
		return hostList{}, &usageError{msg: err.Error(), hint: "each supervisor once, its control and event endpoints at the same place in both lists"}
	}
	return hostList{members: ms, multi: true}, nil
}

const endpointsFileHint = "one supervisor a line: CONTROL EVENT (e.g. tcp://10.0.0.5:18790 tcp://10.0.0.5:18791); # comments; ours or root's, writable by nobody else"

// splitEndpoints splits a comma list of endpoints; "" is one (the
// default). An entry left empty, a bad endpoint, or too many are refused.
func splitEndpoints(flag, v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxHosts {
		return nil, &usageError{msg: fmt.Sprintf("%s: %d endpoints, at most %d", flag, len(parts), maxHosts)}
	}
	for i, p := range parts {
		if p == "" {
			return nil, &usageError{msg: fmt.Sprintf("%s: entry %d of %q is empty", flag, i+1, v), hint: "endpoints separated by single commas, no spaces: tcp://a:18790,tcp://b:18790"}
		}
		if _, _, err := zmtp.Split(p); err != nil {
			if len(parts) > 1 {
				return nil, &usageError{msg: fmt.Sprintf("%s: entry %d: %v", flag, i+1, err), hint: "an endpoint is ipc:///path/to.sock or tcp://host:port"}
			}
			return nil, &usageError{msg: fmt.Sprintf("%s: %v", flag, err), hint: "an endpoint is ipc:///path/to.sock or tcp://host:port"}
		}
	}
	return parts, nil
}

// checkMembers refuses a supervisor listed twice (either endpoint), and
// more than maxHosts; where names an entry.
func checkMembers(ms []client.PoolMember, where func(i int) string) error {
	if len(ms) > maxHosts {
		return fmt.Errorf("%d supervisors, at most %d", len(ms), maxHosts)
	}
	seen := map[string]int{}
	for i, m := range ms {
		for _, ep := range []string{m.Control, m.Event} {
			if j, dup := seen[ep]; dup {
				return fmt.Errorf("%s: %s is listed already (%s)", where(i), ep, where(j))
			}
			seen[ep] = i
		}
	}
	return nil
}

// readEndpointsFile reads a file of supervisors: a line each, "CONTROL
// EVENT", blank lines and # comments left out. Whoever could change it
// could send execctl (and its token) elsewhere: it is read as CURVE's
// public key files are (statedir.ReadTrusted).
func readEndpointsFile(path string) ([]client.PoolMember, error) {
	b, err := statedir.ReadTrusted(path, false, true, maxEndpointsFile)
	if err != nil {
		return nil, err
	}
	var ms []client.PoolMember
	var lines []int
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxEndpointsFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%s:%d: want CONTROL EVENT, found %d fields", path, n, len(f))
		}
		for _, ep := range f {
			if _, _, err := zmtp.Split(ep); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, n, err)
			}
		}
		if len(ms) == maxHosts {
			return nil, fmt.Errorf("%s: more than %d supervisors", path, maxHosts)
		}
		ms = append(ms, client.PoolMember{Control: f[0], Event: f[1]})
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("%s lists no supervisor", path)
	}
	if err := checkMembers(ms, func(i int) string { return fmt.Sprintf("%s:%d", path, lines[i]) }); err != nil {
		return nil, err
	}
	return ms, nil
}

// hostName is how a host shows in tables: its control endpoint, without
// "tcp://" (JSON has the endpoint whole).
func hostName(member string) string { return strings.TrimPrefix(member, "tcp://") }

// on returns the Client of the supervisor that holds job id: with several,
// its host's (as resolveJobs or spawn found it), else g.client.
func (g *globals) on(id string) *client.Client {
	if g.pool != nil {
		if c := g.pool.Client(g.jobHosts[id]); c != nil {
			return c
		}
	}
	return g.client
}

// hostOf returns the host (control endpoint) of job id; "" with one
// supervisor.
func (g *globals) hostOf(id string) string { return g.jobHosts[id] }

// setHost records the host of job id.
func (g *globals) setHost(id, member string) {
	if g.jobHosts == nil {
		g.jobHosts = map[string]string{}
	}
	g.jobHosts[id] = member
}

// hostErr is err of job id, naming its host (with several supervisors).
func (g *globals) hostErr(id string, err error) error {
	var me *client.MemberError
	if err == nil || g.pool == nil || errors.As(err, &me) || g.jobHosts[id] == "" {
		return err
	}
	return &client.MemberError{Member: g.jobHosts[id], JobID: id, Err: err}
}

// resolvePool is resolveJobs across the Pool's hosts: a job's id or name
// asked of the Pool (the host an id's tag names, else every host), then an
// id prefix listed on every host. Each job's host is recorded (setHost).
func (g *globals) resolvePool(ctx context.Context, args []string, patient bool) ([]string, error) {
	out := make([]string, len(args))
	for i, arg := range args {
		id, err := g.resolveOnPool(ctx, arg, patient)
		if err != nil {
			return nil, err
		}
		out[i] = id
	}
	return out, nil
}

// resolveOnPool resolves one JOB argument across the hosts.
func (g *globals) resolveOnPool(ctx context.Context, arg string, patient bool) (string, error) {
	if poolJobID(arg) {
		// A whole id the pool chose: its tag names the host (no round
		// trip, as for a whole generated id with one supervisor).
		if _, m, err := g.pool.Owner(ctx, arg); err == nil {
			g.setHost(arg, m)
			return arg, nil
		}
	}
	pj, err := patiently(ctx, patient, func() (client.PoolJob, error) { return g.pool.Status(ctx, arg) })
	if err == nil {
		g.setHost(pj.JobID, pj.Member)
		return pj.JobID, nil
	}
	var ae *client.AmbiguousJobError
	if errors.As(err, &ae) {
		hosts := make([]string, len(ae.Members))
		for i, m := range ae.Members {
			hosts[i] = hostName(m)
		}
		return "", &usageError{msg: fmt.Sprintf("job %q is known on %d hosts (%s): names (and ids chosen at spawn) are per host", arg, len(hosts), strings.Join(hosts, ", ")),
			hint: "give the job's id (execctl list shows each job's id and host), or --control/--event of its host only"}
	}
	// Not found on the hosts that answered (all, or some: a PartialError
	// says which did not): an id prefix, on the hosts that answer.
	var pe *client.PartialError
	if protocol.CodeOf(err) != protocol.CodeNotFound && !errors.As(err, &pe) {
		return "", err
	}
	prefix, ok, perr := idPrefix(arg)
	if perr != nil {
		return "", perr
	}
	if !ok {
		return "", err
	}
	jobs, lerr := patiently(ctx, patient, func() ([]client.PoolJob, error) {
		return g.pool.ListJobs(ctx, protocol.ListJobsArgs{Brief: true, IDPrefix: prefix})
	})
	infos := make([]protocol.JobInfo, len(jobs))
	for i, j := range jobs {
		infos[i] = j.JobInfo
	}
	id, merr := matchPrefix(arg, prefix, infos)
	if merr != nil {
		return "", merr
	}
	var hosts []string
	for _, j := range jobs {
		if j.JobID == id {
			hosts = append(hosts, hostName(j.Member))
			g.setHost(id, j.Member)
		}
	}
	switch {
	case len(hosts) > 1:
		return "", &usageError{msg: fmt.Sprintf("job %s is known on %d hosts (%s)", id, len(hosts), strings.Join(hosts, ", ")), hint: "give --control/--event of its host only"}
	case len(hosts) == 1:
		return id, nil
	case lerr != nil && errors.As(lerr, &pe):
		// (no match on the hosts that answered: one that did not may
		// hold it)
		return "", fmt.Errorf("job %s: not found on the hosts that answered: %w", arg, lerr)
	case lerr != nil:
		return "", lerr
	}
	return "", err // (not found on any host)
}

// poolJobID reports whether id has the shape of an id a Pool chose ("p",
// a host's tag of 8 hex digits, "-", 16 hex digits).
func poolJobID(id string) bool {
	return len(id) == 26 && id[0] == 'p' && id[9] == '-' && hexDigits(id[1:9]) && hexDigits(id[10:])
}

// idPrefix is the id prefix arg stands for, if it is one: "j-" and hex
// digits (see jobPrefix), or the start of an id a Pool chose ("p", the
// host's tag of 8 hex digits, "-", hex digits). Fewer than minPrefix
// digits is a usage error.
func idPrefix(arg string) (prefix string, ok bool, err error) {
	lower := strings.ToLower(arg)
	if len(lower) > 10 && lower[0] == 'p' && lower[9] == '-' && hexDigits(lower[1:9]) && hexDigits(lower[10:]) {
		prefix, lower = lower, lower[10:]
	} else {
		prefix = jobPrefix(arg)
		lower = strings.TrimPrefix(prefix, "j-")
	}
	if !hexDigits(lower) {
		return "", false, nil
	}
	if len(lower) < minPrefix {
		return "", false, &usageError{msg: fmt.Sprintf("job %q: no job has that name or id; give at least %d characters of an id", arg, minPrefix), hint: "job ids and names are shown by: execctl list"}
	}
	return prefix, true, nil
}
