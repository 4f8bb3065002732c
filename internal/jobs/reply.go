package jobs

import (
	"sort"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// reply assembles a subscribe result from a job's retained events, in
// seq order: the events with seq >= from, at most limit of them and
// about MaxSubscribeBytes of payload (one at least), the seqs between
// them that are no longer retained reported missing.
type reply struct {
	res   protocol.SubscribeResult
	limit int
	size  int
	next  uint64 // the first seq not yet accounted for
}

func newReply(info protocol.JobInfo, from uint64, limit int) *reply {
	return &reply{res: protocol.SubscribeResult{Job: info, Events: []protocol.Event{}}, limit: limit, next: from}
}

// add appends ev (seq >= from, after the events added before); the seqs
// skipped since the last one are reported missing. It reports false,
// adding nothing, once the reply is full (More).
func (r *reply) add(ev protocol.Event) bool {
	if len(r.res.Events) >= r.limit || (len(r.res.Events) > 0 && r.size+len(ev.Payload) > protocol.MaxSubscribeBytes) {
		r.res.More = true
		return false
	}
	if ev.Seq > r.next {
		r.res.Missing = append(r.res.Missing, protocol.SeqRange{From: r.next, To: ev.Seq - 1})
	}
	r.next = ev.Seq + 1
	r.size += len(ev.Payload)
	r.res.Events = append(r.res.Events, ev)
	return true
}

// end reports the seqs up to last that no event accounted for missing,
// unless the reply stopped early (More).
func (r *reply) end(last uint64) {
	if !r.res.More && r.next <= last {
		r.res.Missing = append(r.res.Missing, protocol.SeqRange{From: r.next, To: last})
	}
}

// outputMap says what is known of a job's output offsets beyond the
// events of a reply, for sizeMissing.
type outputMap struct {
	// at returns the offset at which the output of the events with seq
	// >= seq begins, when known exactly (nil: nothing more is known).
	at func(seq uint64) (int64, bool)
	// skipsIn reports whether offsets skipped after a supervisor crash
	// lie in [a, b) (output the dead supervisor published there is not
	// known); nil: none do.
	skipsIn func(a, b int64) bool
	// end is the end of the job's output (after its last seq).
	end int64
	// bound, when not negative, bounds all the missing output (say, all
	// the output evicted).
	bound int64
}

// sizeMissing gives each missing range of res whose output is known
// exactly its size (Bytes; NoOutput when that is none), from the events
// around it in the reply (an output event's offset and end, a terminal
// event's output end, the start of the output before seq 1) or from m,
// and sets res.MissingBytes: their sum, plus an upper bound of the
// output of the others (within m.bound).
func sizeMissing(res *protocol.SubscribeResult, m outputMap) {
	res.MissingBytes = 0
	if len(res.Missing) == 0 {
		return
	}
	last := res.Job.LastSeq
	var exact, bounds int64
	inexact := false
	for i := range res.Missing {
		rg := &res.Missing[i]
		loMin, _, okLo := outAt(res.Events, rg.From-1, last, m)
		hiMin, hiMax, okHi := outAt(res.Events, rg.To, last, m)
		if okLo && okHi && hiMin >= loMin && (m.skipsIn == nil || !m.skipsIn(loMin, hiMin)) {
			rg.Bytes, rg.NoOutput = hiMin-loMin, hiMin == loMin
			exact += rg.Bytes
			continue
		}
		inexact = true
		bounds += max(hiMax-loMin, 0)
	}
	if inexact && m.bound >= 0 {
		bounds = min(bounds, max(m.bound-exact, 0))
	}
	res.MissingBytes = exact + bounds
}

// outAt returns the output offset after the events with seq <= s (the
// offset at which the output of those after them begins), from the
// events of evs (in seq order): exact (min == max) when an event that
// tells it (an output event, a terminal event) is next to s with only
// events that carry no output between, or when the events on both sides
// that tell it meet; else the range it lies in (offsets never go back).
// At seq 0 it is 0, at last the output's end. m.at is asked when evs do
// not tell.
func outAt(evs []protocol.Event, s, last uint64, m outputMap) (lo, hi int64, exact bool) {
	if s == 0 {
		return 0, 0, true
	}
	if s >= last {
		return m.end, m.end, true
	}
	k := sort.Search(len(evs), func(k int) bool { return evs[k].Seq > s }) // (evs[:k] are <= s)
	lo, loExact, found := int64(0), true, false
	want := s // (the seq the walk down needs next to stay exact)
	for i := k - 1; i >= 0; i-- {
		if evs[i].Seq != want {
			loExact = false
		}
		want = evs[i].Seq - 1
		if off, n, ok := eventOutput(evs[i]); ok {
			lo, found = off+n, true
			break
		}
	}
	if !found && want != 0 {
		loExact = false // (events before the first in evs are not known)
	}
	hi, hiExact := m.end, true
	want, found = s+1, false
	for i := k; i < len(evs); i++ {
		if evs[i].Seq != want {
			hiExact = false
		}
		want = evs[i].Seq + 1
		if off, _, ok := eventOutput(evs[i]); ok {
			hi, found = off, true
			break
		}
	}
	if !found && want <= last {
		hiExact = false // (events after the last in evs are not known)
	}
	switch {
	case loExact:
		return lo, lo, true
	case hiExact:
		return hi, hi, true
	}
	if m.at != nil {
		if off, ok := m.at(s + 1); ok {
			return off, off, true
		}
	}
	if lo >= hi {
		return lo, lo, lo == hi // (lo > hi: offsets that go back, input)
	}
	return lo, hi, false
}

// eventOutput returns where ev's output lies: an output event's offset
// and size; a terminal event's output end (size 0); false for events
// that say nothing of it.
func eventOutput(ev protocol.Event) (off, n int64, ok bool) {
	switch {
	case ev.Kind == protocol.KindStdout || ev.Kind == protocol.KindStderr:
		p, err := ev.Output()
		if err != nil {
			return 0, 0, false
		}
		return p.Offset, int64(len(p.Data)), true
	case ev.Kind.Terminal():
		var p protocol.ExitPayload
		if ev.DecodePayload(&p) != nil {
			return 0, 0, false
		}
		return p.OutputEnd, 0, true
	}
	return 0, 0, false
}
