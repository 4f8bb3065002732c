package openclaw

import (
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// read is what readEvents read of a job.
type read struct {
	events []protocol.Event
	job    protocol.JobInfo // as of the last page read
	// last is the seq of the last event read (0: none); cut says the
	// reply bound stopped the reading before the job's newest event.
	last uint64
	cut  bool
}

// next is the dialect seq that follows what was read: the job's next
// seq, or, read cut short, the one after the last event returned. (A
// dialect seq is the native one - 1, so the next dialect seq is the
// native seq of the last event.)
func (rd *read) next() int64 {
	if rd.cut {
		return int64(rd.last)
	}
	return int64(rd.job.LastSeq)
}

// readEvents reads job id's retained events from native seq from on,
// keeping those of the kinds keep takes, through native subscribes
// (flush: the first publishes the output in the merge window first), at
// most about maxReplyOutput of output.
func readEvents(n Native, id string, from uint64, flush bool, keep func(protocol.Kind) bool) (read, error) {
	var rd read
	size := 0
	for {
		var res *protocol.SubscribeResult
		a := protocol.SubscribeArgs{JobID: id, FromSeq: from, Flush: flush}
		if err := call(n, protocol.OpSubscribe, &a, &res); err != nil {
			return read{}, err
		}
		flush = false
		rd.job = res.Job
		for _, ev := range res.Events {
			if keep(ev.Kind) {
				rd.events = append(rd.events, ev)
				size += len(ev.Payload)
			}
			rd.last, from = ev.Seq, ev.Seq+1
		}
		if !res.More || len(res.Events) == 0 {
			return rd, nil
		}
		if size >= maxReplyOutput {
			rd.cut = true
			return rd, nil
		}
	}
}

// decodeAll returns the text of each output event of evs (in seq order;
// "" for other kinds), decoded as decodeOutput says. Where a stream's
// first event here starts inside a character, the bytes that begin it
// are looked for in the stream's previous events (lookback).
func decodeAll(n Native, id string, evs []protocol.Event) []string {
	texts := make([]string, len(evs))
	var carry [2][]byte
	var known [2]bool
	for i := range evs {
		ev := &evs[i]
		if !isOutput(ev.Kind) {
			continue
		}
		p, err := ev.Output()
		if err != nil {
			continue // (not the supervisor's: nothing to show)
		}
		s := 0
		if ev.Kind == protocol.KindStderr {
			s = 1
		}
		if !known[s] {
			known[s] = true
			if len(p.Data) > 0 && isCont(p.Data[0]) {
				carry[s] = lookback(n, id, ev.Seq, ev.Kind)
			}
		}
		texts[i], carry[s] = decodeOutput(carry[s], p.Data)
	}
	return texts
}

// lookback returns the tail the output events of kind k before native
// seq seq leave (nil when there are none within lookbackEvents, or they
// are gone).
func lookback(n Native, id string, seq uint64, k protocol.Kind) []byte {
	from := uint64(1)
	if seq > lookbackEvents {
		from = seq - lookbackEvents
	}
	var res *protocol.SubscribeResult
	if seq <= from || call(n, protocol.OpSubscribe, &protocol.SubscribeArgs{JobID: id, FromSeq: from, Limit: int(seq - from)}, &res) != nil {
		return nil
	}
	var carry []byte
	for i := range res.Events {
		ev := &res.Events[i]
		if ev.Seq >= seq || ev.Kind != k {
			continue
		}
		if p, err := ev.Output(); err == nil {
			_, carry = decodeOutput(carry, p.Data)
		}
	}
	return carry
}
