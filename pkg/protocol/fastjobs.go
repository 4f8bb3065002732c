package protocol

import (
	"encoding/binary"
	"math"
	"slices"
)

// Hand-written codecs of the replies that carry many jobs (status of
// all, list-jobs): the generic encoder and decoder spend ~5 µs each per
// job by reflection, 10 ms for a thousand jobs, which was most of a
// status of all jobs. They follow the rules of the spawn path's
// (fastmsg.go): the same bytes as Marshal, or a decline (a job with
// limits, say) that leaves the value to the generic codec.

// appendUsage encodes u as Marshal does (floats as float64).
func appendUsage(b []byte, u *Usage) []byte {
	w := newMW(b)
	w.int("processes", int64(u.Processes), false)
	w.int("rssBytes", u.RSSBytes, false)
	w.float("cpuSeconds", u.CPUSeconds)
	w.float("cpuPercent", u.CPUPercent)
	w.int("sampledAt", u.SampledAt, false)
	return w.end()
}

// float writes a float64 field (Marshal does not compact floats).
func (w *mw) float(k string, v float64) {
	w.key(k)
	w.b = binary.BigEndian.AppendUint64(append(w.b, 0xcb), math.Float64bits(v))
}

// appendJobs encodes a []JobInfo field; false if a job is left to
// Marshal. A nil slice is omitted when omitEmpty, else nil, as Marshal
// has it.
func (w *mw) jobs(k string, jobs []JobInfo, omitEmpty bool) bool {
	if omitEmpty && len(jobs) == 0 {
		return true
	}
	w.key(k)
	if jobs == nil {
		w.b = append(w.b, 0xc0)
		return true
	}
	// (about a job's encoded size each, at once: a reply of a thousand
	// is not grown and copied a dozen times on its way to ~600 KB)
	w.b = slices.Grow(w.b, 768*len(jobs))
	w.b = appendArrayLen(w.b, len(jobs))
	for i := range jobs {
		var ok bool
		if w.b, ok = appendJobInfo(w.b, &jobs[i]); !ok {
			return false
		}
	}
	return true
}

// fastJobsResult encodes a StatusResult or ListJobsResult by hand.
func fastJobsResult(b []byte, result any) ([]byte, bool) {
	switch r := result.(type) {
	case StatusResult:
		return appendStatusResult(b, &r)
	case *StatusResult:
		if r != nil {
			return appendStatusResult(b, r)
		}
	case ListJobsResult:
		return appendListJobsResult(b, &r)
	case *ListJobsResult:
		if r != nil {
			return appendListJobsResult(b, r)
		}
	}
	return b, false
}

func appendStatusResult(b []byte, r *StatusResult) ([]byte, bool) {
	w := newMW(b)
	if r.Job != nil {
		w.key("job")
		var ok bool
		if w.b, ok = appendJobInfo(w.b, r.Job); !ok {
			return b, false
		}
	}
	if !w.jobs("jobs", r.Jobs, true) {
		return b, false
	}
	return w.end(), true
}

func appendListJobsResult(b []byte, r *ListJobsResult) ([]byte, bool) {
	w := newMW(b)
	if !w.jobs("jobs", r.Jobs, false) {
		return b, false
	}
	w.bool("more", r.More, true)
	w.str("next", r.Next, true)
	return w.end(), true
}

// float64Value reads a float (32 or 64 bits) or an integer, as the
// generic decoder takes for a float64 field.
func (m *mp) float64Value() (float64, bool) {
	if m.i < len(m.b) {
		switch m.b[m.i] {
		case 0xca:
			m.i++
			v, err := m.be(4)
			return float64(math.Float32frombits(uint32(v))), err == nil
		case 0xcb:
			m.i++
			v, err := m.be(8)
			return math.Float64frombits(v), err == nil
		}
	}
	v, ok := m.intIn(math.MinInt64, math.MaxInt64)
	return float64(v), ok
}

// usageTo reads a job's usage into *p: a map, or nil (no usage). A
// second usage of the same job is left to the generic decoder (which
// merges it into the first).
func (m *mp) usageTo(p **Usage) bool {
	if *p != nil {
		return false
	}
	if m.i < len(m.b) && m.b[m.i] == 0xc0 {
		m.i++
		return true
	}
	u := &Usage{}
	*p = u
	return m.fields(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "processes":
			ok = m.intTo(&u.Processes)
		case "rssBytes":
			ok = m.i64To(&u.RSSBytes)
		case "cpuSeconds":
			u.CPUSeconds, ok = m.float64Value()
		case "cpuPercent":
			u.CPUPercent, ok = m.float64Value()
		case "sampledAt":
			ok = m.i64To(&u.SampledAt)
		default:
			ok = m.skipped()
		}
		return ok
	})
}

// jobsTo reads an array of jobs (nil: none) into *p. A second array for
// the same field is left to the generic decoder.
func (m *mp) jobsTo(p *[]JobInfo) bool {
	if *p != nil {
		return false
	}
	if m.i < len(m.b) && m.b[m.i] == 0xc0 {
		m.i++
		return true
	}
	n, err := m.length(0x90, 0xdc, false)
	if err != nil || n > len(m.b)-m.i || n > fastMaxElems { // (each job takes a byte at least)
		return false
	}
	jobs := make([]JobInfo, n)
	*p = jobs
	for k := range jobs {
		if !fastJobInfo(m, &jobs[k]) {
			return false
		}
	}
	return true
}

// fastStatusResult decodes the result of a status reply.
func fastStatusResult(b []byte, r *StatusResult) bool {
	m := mp{b: b}
	ok := m.fields(func(key []byte) bool {
		switch string(key) {
		case "job":
			if r.Job != nil {
				return false // the generic decoder merges a second one
			}
			if m.i < len(m.b) && m.b[m.i] == 0xc0 {
				m.i++
				return true
			}
			r.Job = &JobInfo{}
			return fastJobInfo(&m, r.Job)
		case "jobs":
			return m.jobsTo(&r.Jobs)
		}
		return m.skipped()
	})
	return ok && m.i == len(b)
}

// fastListJobsResult decodes the result of a list-jobs reply.
func fastListJobsResult(b []byte, r *ListJobsResult) bool {
	m := mp{b: b}
	ok := m.fields(func(key []byte) bool {
		switch string(key) {
		case "jobs":
			return m.jobsTo(&r.Jobs)
		case "more":
			return m.boolTo(&r.More)
		case "next":
			return m.strTo(&r.Next)
		}
		return m.skipped()
	})
	return ok && m.i == len(b)
}
