package server

import (
	"github.com/exec-supervisor/exec-supervisor/internal/jobs"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// statusAll answers status without a job id: every job known, in one
// reply. A reply past protocol.MaxReplyBytes is refused (too-large); here
// that is decided from a bound on the jobs' encoded size before anything
// is encoded, so that a request cannot make the supervisor encode
// hundreds of megabytes (1,500 finished jobs of 200 KiB argv took 1.8 GB
// per call) only to refuse them. list-jobs pages instead.
func (s *Server) statusAll() (any, error) {
	all, _ := s.jobs.ListAfter(jobs.ListFilter{}, 0, 0, "")
	size := 0
	for i := range all {
		if size += infoSizeBound(&all[i]); size > protocol.MaxReplyBytes {
			return nil, protocol.Errorf(protocol.CodeTooLarge,
				"status of all %d jobs would be over %d bytes; list-jobs pages through them (execctl list)", len(all), protocol.MaxReplyBytes)
		}
	}
	s.jobs.AttachUsage(all)
	return protocol.StatusResult{Jobs: all}, nil
}

// infoSizeBound is at least the msgpack size of j: its strings (each with
// a 5-byte header at most) and 1 KiB for its keys and fixed-size fields
// (about 60 of each, ~600 bytes encoded), usage included.
func infoSizeBound(j *protocol.JobInfo) int {
	n := 1024
	str := func(v string) { n += len(v) + 5 }
	for _, a := range j.Argv {
		str(a)
	}
	for k, v := range j.Labels {
		str(k)
		str(v)
	}
	if l := j.Limits; l != nil {
		for _, a := range l.Applied {
			str(a)
		}
		for k, v := range l.Unavailable {
			str(k)
			str(v)
		}
	}
	for _, v := range []string{j.JobID, j.Name, string(j.State), j.Shell, j.Cwd, j.SessionID, string(j.Reason), j.Signal, j.Error,
		j.Ownership, j.Cgroup, j.Restart, j.NotifyStatus} {
		str(v)
	}
	return n
}
