package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/exec-supervisor/exec-supervisor/pkg/client"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// What execctl prints with several supervisors: each job's host (a HOST
// column; "host" in JSON, its control endpoint), and the hosts that did
// not answer (stderr, exit code 6 when others did).

// hostJob is a job as --json prints it with several supervisors: its
// fields and its host.
type hostJob struct {
	protocol.JobInfo
	Host string `json:"host"`
}

// jobJSON is job as --json prints it: with its host when there are
// several supervisors.
func (g *globals) jobJSON(job protocol.JobInfo) any {
	if g.pool == nil {
		return job
	}
	return hostJob{JobInfo: job, Host: g.hostOf(job.JobID)}
}

// spawnResultJSON is r as --json prints it (spawn, wait).
func (g *globals) spawnResultJSON(r protocol.SpawnResult) any {
	if g.pool == nil {
		return r
	}
	return struct {
		JobID    string  `json:"jobId"`
		Job      hostJob `json:"job"`
		Finished bool    `json:"finished,omitempty"`
	}{r.JobID, hostJob{JobInfo: r.Job, Host: g.hostOf(r.JobID)}, r.Finished}
}

// onThisMachine reports whether every supervisor is on this machine (ipc
// endpoints): a relative --cwd is then the operator's.
func (g *globals) onThisMachine() bool {
	if g.pool == nil {
		return strings.HasPrefix(g.client.Options().ControlAddress, "ipc://")
	}
	for _, m := range g.pool.Members() {
		if !strings.HasPrefix(m.Member, "ipc://") {
			return false
		}
	}
	return true
}

// listPool lists the jobs of every host (see listJobs), recording each
// job's host; a *client.PartialError says which hosts did not answer.
func (g *globals) listPool(ctx context.Context, a protocol.ListJobsArgs) ([]protocol.JobInfo, []string, error) {
	pjs, err := g.pool.ListJobs(ctx, a)
	var pe *client.PartialError
	if err != nil && !errors.As(err, &pe) {
		return nil, nil, err
	}
	jobs, hosts := make([]protocol.JobInfo, len(pjs)), make([]string, len(pjs))
	for i, j := range pjs {
		jobs[i], hosts[i] = j.JobInfo, j.Member
		g.setHost(j.JobID, j.Member)
	}
	return jobs, hosts, err
}

// hostsFailed reports the hosts of pe (each with what to do about it) and
// returns the exit code: exitPartial when others answered (their results
// are printed), else the first host's as one supervisor's would be.
func (g *globals) hostsFailed(name string, pe *client.PartialError) int {
	errs := make([]error, len(pe.Errs))
	for i, me := range pe.Errs {
		errs[i] = me
	}
	total := len(g.pool.Members())
	return g.failures(name, errs, total, fmt.Sprintf("%d of %d hosts did not answer; the others' results are shown", len(errs), total))
}

// failures reports errs (nil ones left out), the errors of some of total
// parts of a command (hosts asked, jobs followed), and returns the exit
// code: exitPartial when some parts went well, else the first error's.
// msg says what that means; with --json, one error object whose "hosts"
// are the errors.
func (g *globals) failures(name string, errs []error, total int, msg string) int {
	var hosts []hostError
	for _, err := range errs {
		if err != nil {
			e := explain(g, name, err)
			hosts = append(hosts, hostError{Host: e.Host, cliError: e})
		}
	}
	if len(hosts) == 0 {
		return exitOK
	}
	e := cliError{Code: codePartial, ExitCode: exitPartial, Command: name, Hosts: hosts, Message: msg}
	if len(hosts) >= total { // (nothing went well)
		e.Code, e.ExitCode, e.Message = hosts[0].Code, hosts[0].ExitCode, hosts[0].Message
		if len(hosts) > 1 {
			e.Message = fmt.Sprintf("%d of %d failed; the first: %s", len(hosts), total, hosts[0].Message)
		}
	}
	if g.json {
		return g.fail(e)
	}
	for _, h := range hosts {
		g.fail(h.cliError)
	}
	if len(hosts) > 1 || e.Code == codePartial {
		fmt.Fprintf(g.stderr, "execctl %s: %s (exit code %d)\n", name, msg, e.ExitCode)
	}
	return e.ExitCode
}

// isHostDown reports whether err says a supervisor did not answer (not
// what one answered).
func isHostDown(err error) bool {
	var ce *client.ConnectError
	var pe *client.PartialError
	return err != nil && (errors.Is(err, client.ErrMemberDown) || errors.As(err, &ce) || errors.As(err, &pe) ||
		isTimeout(err) || errors.Is(err, context.DeadlineExceeded))
}

// resolveToShow resolves logs' JOB arguments. With several supervisors,
// those whose host does not answer are left out, their errors returned
// as unreached (the others are shown); any other error ends it.
func (g *globals) resolveToShow(ctx context.Context, args []string) (ids []string, unreached []error, err error) {
	if g.pool == nil {
		ids, err = g.resolveJobs(ctx, args, true)
		return ids, nil, err
	}
	for _, arg := range args {
		id, err := g.resolveOnPool(ctx, arg, true)
		switch {
		case err == nil:
			ids = append(ids, id)
		case isHostDown(err):
			unreached = append(unreached, err)
		default:
			return nil, nil, err
		}
	}
	return ids, unreached, nil
}

// eventJSON is ev as --json prints it, with its job's host when there are
// several supervisors.
func (g *globals) eventJSON(ev protocol.Event) jsonEvent {
	je := eventJSON(ev)
	je.Host = g.hostOf(ev.JobID)
	return je
}

// hostError is one host's error in a cliError of several (its Hosts).
type hostError struct {
	Host string `json:"host"`
	cliError
}

// cmdName is the command being run ("list"), once its flags are parsed.
func (g *globals) cmdName() string {
	if g.cmdFlags == nil {
		return ""
	}
	return strings.TrimPrefix(g.cmdFlags.Name(), "execctl ")
}
