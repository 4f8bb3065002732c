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
// output of the others.
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
		lo, okLo := offsetAt(res.Events, rg.From, last, m)
		hi, okHi := offsetAt(res.Events, rg.To+1, last, m)
		if okLo && okHi && hi >= lo && (m.skipsIn == nil || !m.skipsIn(lo, hi)) {
			rg.Bytes, rg.NoOutput = hi-lo, hi == lo
			exact += rg.Bytes
			continue
		}
		inexact = true
		if !okHi {
			hi = m.end
		}
		if !okLo {
			lo = 0
		}
		bounds += max(hi-lo, 0)
	}
	if inexact && m.bound >= 0 {
		bounds = min(bounds, max(m.bound-exact, 0))
	}
	res.MissingBytes = exact + bounds
}

// offsetAt returns the offset at which the output of the events with
// seq >= seq begins, when known exactly: from the events of evs (in seq
// order) next to seq, walking over events other than output that carry
// no offset; at seq 1 or before it, 0; past last, the output's end; or
// from m.at.
func offsetAt(evs []protocol.Event, seq, last uint64, m outputMap) (int64, bool) {
	if seq <= 1 {
		return 0, true
	}
	if seq > last {
		return m.end, true
	}
	find := func(s uint64) (protocol.Event, bool) {
		k := sort.Search(len(evs), func(k int) bool { return evs[k].Seq >= s })
		if k < len(evs) && evs[k].Seq == s {
			return evs[k], true
		}
		return protocol.Event{}, false
	}
	// The event before seq (and those before it, while they carry no
	// output and no offset): where its output ends.
	for s := seq - 1; ; s-- {
		if s == 0 {
			return 0, true
		}
		ev, ok := find(s)
		if !ok {
			break
		}
		if off, n, ok := eventOutput(ev); ok {
			return off + n, true
		}
	}
	// The event at seq (and those after it, likewise): where its output
	// begins.
	for s := seq; s <= last; s++ {
		ev, ok := find(s)
		if !ok {
			break
		}
		if off, _, ok := eventOutput(ev); ok {
			return off, true
		}
	}
	if m.at != nil {
		return m.at(seq)
	}
	return 0, false
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
