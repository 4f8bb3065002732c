package jobs

import "github.com/exec-supervisor/exec-supervisor/pkg/protocol"

// chunk is one output event as retained: its data is immutable once stored.
type chunk struct {
	protocol.Chunk
	ts int64
	// payload is the event's encoded payload (Data aliases its tail), kept
	// for replay without re-encoding; nil for chunks restored from a journal.
	payload []byte
	// attempt is the run of a service job that produced it (0 otherwise).
	attempt int
}

// ring retains a job's most recent output chunks up to max bytes of data,
// dropping the oldest whole chunks first. Memory grows with what is
// actually retained: nothing is preallocated.
type ring struct {
	max     int
	chunks  []chunk // chunks[head:] are live
	head    int
	bytes   int
	evicted int64 // bytes ever evicted
	// end is the combined output offset just past the newest byte ever stored.
	end int64
}

func newRing(max int) *ring { return &ring{max: max} }

// add stores c. c.Offset must equal r.end.
func (r *ring) add(c chunk) {
	r.chunks = append(r.chunks, c)
	r.bytes += len(c.Data)
	r.end = c.Offset + int64(len(c.Data))
	for r.bytes > r.max && r.head < len(r.chunks) {
		old := &r.chunks[r.head]
		r.bytes -= len(old.Data)
		r.evicted += int64(len(old.Data))
		*old = chunk{}
		r.head++
	}
	// Compact once the dead prefix dominates, so the backing array tracks
	// the live size.
	if r.head > 32 && r.head*2 > len(r.chunks) {
		live := make([]chunk, len(r.chunks)-r.head, (len(r.chunks)-r.head)*5/4+1)
		copy(live, r.chunks[r.head:])
		r.chunks, r.head = live, 0
	}
}

func (r *ring) live() []chunk { return r.chunks[r.head:] }

// from is the offset of the oldest retained byte.
func (r *ring) from() int64 {
	if l := r.live(); len(l) > 0 {
		return l[0].Offset
	}
	return r.end
}

// firstSeq is the seq of the oldest retained chunk, or 0 when none is.
func (r *ring) firstSeq() uint64 {
	if l := r.live(); len(l) > 0 {
		return l[0].Seq
	}
	return 0
}

// read returns retained output at or after cursor, at most max bytes (at
// least one chunk's worth is never split below max). The first chunk is
// trimmed to start at cursor.
func (r *ring) read(cursor int64, max int64) (out []protocol.Chunk, next int64, more bool) {
	next = cursor
	if next < r.from() {
		next = r.from()
	}
	var n int64
	for _, c := range r.live() {
		end := c.Offset + int64(len(c.Data))
		if end <= next {
			continue
		}
		d := c.Data
		off := c.Offset
		if off < next {
			d = d[next-off:]
			off = next
		}
		if n+int64(len(d)) > max {
			if room := max - n; room > 0 {
				out = append(out, protocol.Chunk{Seq: c.Seq, Stream: c.Stream, Offset: off, Data: d[:room]})
				next = off + room
			}
			return out, next, true
		}
		out = append(out, protocol.Chunk{Seq: c.Seq, Stream: c.Stream, Offset: off, Data: d})
		n += int64(len(d))
		next = off + int64(len(d))
	}
	return out, next, false
}
