package jobs

import (
	"errors"
	"fmt"

	"github.com/exec-supervisor/exec-supervisor/internal/cgroups"
	"github.com/exec-supervisor/exec-supervisor/internal/limits"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// A job's limits: rlimits and niceness applied in the child before exec
// (through the limits helper), memory and CPU weight on its cgroup; what
// took and what could not is recorded for its info (j.run.limits).

// rlimits returns the child-side limits of the spec.
func (j *Job) rlimits() limits.Limits {
	l := j.spec.Limits
	if l == nil {
		return limits.Limits{}
	}
	return limits.Limits{NoFile: l.MaxOpenFiles, AddressSpace: l.MaxAddressSpaceBytes, Nice: l.Nice}
}

// wrapLimits makes cmd start through the limits helper when the spec has
// rlimits or a niceness, and records them as applied.
func (j *Job) wrapLimits(path string, argv []string) (string, []string, error) {
	l := j.rlimits()
	if l.Empty() {
		return path, argv, nil
	}
	if j.m.limitsHelper == "" {
		return "", nil, errors.New("limits.maxOpenFiles, maxAddressSpaceBytes and nice need a limits helper, and none is configured (the supervisor always has one; pkg/local's Engine needs Options.LimitsHelper)")
	}
	cp, ca := limits.Wrap(j.m.limitsHelper, l, path, argv)
	var applied []string
	if l.NoFile > 0 {
		applied = append(applied, fmt.Sprintf("maxOpenFiles=%d", l.NoFile))
	}
	if l.AddressSpace > 0 {
		applied = append(applied, fmt.Sprintf("maxAddressSpaceBytes=%d", l.AddressSpace))
	}
	if l.Nice != nil {
		applied = append(applied, fmt.Sprintf("nice=%d", *l.Nice))
	}
	j.recordLimits(applied, nil)
	return cp, ca, nil
}

// recordLimits adds to what the current run's limits info reports.
func (j *Job) recordLimits(applied []string, unavailable map[string]string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.run.limits == nil {
		j.run.limits = &protocol.LimitsInfo{}
	}
	j.run.limits.Applied = append(j.run.limits.Applied, applied...)
	for k, v := range unavailable {
		if j.run.limits.Unavailable == nil {
			j.run.limits.Unavailable = map[string]string{}
		}
		j.run.limits.Unavailable[k] = v
	}
}

// hasCgroupLimits reports whether the spec asks for cgroup limits.
func (j *Job) hasCgroupLimits() bool {
	l := j.spec.Limits
	return l != nil && (l.MemoryMaxBytes != 0 || l.CPUWeight != 0)
}

// applyCgroupLimits writes the spec's cgroup limits on the run's new
// cgroup (before any process is in it) and records what took.
func (j *Job) applyCgroupLimits(cg *cgroups.Cgroup) {
	if !j.hasCgroupLimits() {
		return
	}
	res := cg.SetLimits(j.spec.Limits.MemoryMaxBytes, j.spec.Limits.CPUWeight)
	j.recordLimits(res.Applied, res.Unavailable)
	if len(res.Unavailable) > 0 {
		j.m.log.Warn("job cgroup limits not applied", "job", j.id, "unavailable", res.Unavailable)
	}
}

// noCgroupLimits records cgroup limits as unavailable (no cgroup per job).
func (j *Job) noCgroupLimits() {
	if !j.hasCgroupLimits() {
		return
	}
	why := "no cgroup per job (cgroup v2 not writable here, or --no-cgroups); see health.cgroupsNote"
	unavailable := map[string]string{}
	if j.spec.Limits.MemoryMaxBytes > 0 {
		unavailable["memory.max"] = why
	}
	if j.spec.Limits.CPUWeight > 0 {
		unavailable["cpu.weight"] = why
	}
	j.recordLimits(nil, unavailable)
	j.m.log.Warn("job cgroup limits not applied: no cgroup per job", "job", j.id)
}
