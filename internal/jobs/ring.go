package jobs

import (
	"sort"

	"github.com/exec-supervisor/exec-supervisor/internal/journal"
	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

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

// ring retains a job's most recent output chunks up to max bytes of
// memory, dropping the oldest whole chunks first. What a chunk costs is its
// encoded event (its data included) plus chunkOverhead, so that a job
// printing a byte at a time cannot hold a hundred times max in chunk
// records (measured: 600,000 one-byte events held 68 MB with a 1 MiB
// ring). Memory grows with what is actually retained: nothing is
// preallocated.
type ring struct {
	max     int
	chunks  []chunk // chunks[head:] are live
	head    int
	bytes   int   // output bytes retained
	cost    int   // memory retained (see chunkCost)
	evicted int64 // bytes ever evicted
	// gone indexes the newest evicted chunks (seq and offset, at most
	// goneMax), so that the size of a missing seq range is exact; goneCut
	// says older entries were dropped from it.
	gone    []seqOffset
	goneCut bool
	// end is the combined output offset just past the newest byte ever stored.
	end int64
	// skips are the offset ranges no output was ever stored at (see
	// skipTo), oldest first, at most skipsMax.
	skips []journal.OffsetRange
}

// skipsMax bounds the skips a ring remembers (one per supervisor crash
// a service lived through); a span across older ones counts them as
// output.
const skipsMax = 64

func newRing(max int) *ring { return &ring{max: max} }

// chunkOverhead approximates what retaining a chunk costs beyond its
// encoded event: the chunk record in the ring's array and the payload's
// allocation.
const chunkOverhead = 128

// chunkCost is the memory c holds in the ring.
func chunkCost(c *chunk) int {
	if c.payload != nil { // (its data is the payload's tail)
		return len(c.payload) + chunkOverhead
	}
	return len(c.Data) + chunkOverhead
}

// skipTo moves the end of the output to off without storing anything
// there: the offsets in between never hold output (a service resumed
// after its supervisor died goes on past every offset the dead one may
// have published). Nothing happens if off is not past the end.
func (r *ring) skipTo(off int64) {
	if off <= r.end {
		return
	}
	if len(r.skips) >= skipsMax {
		r.skips = append(r.skips[:0], r.skips[1:]...)
	}
	r.skips = append(r.skips, journal.OffsetRange{At: r.end, N: off - r.end})
	r.end = off
}

// span returns how many bytes of output lie in the offsets [a, b): b-a
// less the skipped offsets among them.
func (r *ring) span(a, b int64) int64 {
	n := b - a
	for _, s := range r.skips {
		if lo, hi := max(a, s.At), min(b, s.At+s.N); hi > lo {
			n -= hi - lo
		}
	}
	return max(n, 0)
}

// skipAt returns the end of the skipped offsets off lies in (false: it
// lies in none).
func (r *ring) skipAt(off int64) (end int64, ok bool) {
	for _, s := range r.skips {
		if off >= s.At && off < s.At+s.N {
			return s.At + s.N, true
		}
	}
	return 0, false
}

// skipsIn reports whether skipped offsets lie in [a, b).
func (r *ring) skipsIn(a, b int64) bool {
	for _, s := range r.skips {
		if s.At < b && s.At+s.N > a {
			return true
		}
	}
	return false
}

// add stores c. c.Offset must equal r.end.
func (r *ring) add(c chunk) {
	r.chunks = append(r.chunks, c)
	r.bytes += len(c.Data)
	r.cost += chunkCost(&c)
	r.end = c.Offset + int64(len(c.Data))
	for r.cost > r.max && r.head < len(r.chunks) {
		old := &r.chunks[r.head]
		if len(r.gone) >= goneMax {
			r.gone = append(r.gone[:0], r.gone[goneMax/2:]...)
			r.goneCut = true
		}
		r.gone = append(r.gone, seqOffset{old.Seq, old.Offset})
		r.bytes -= len(old.Data)
		r.cost -= chunkCost(old)
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

type seqOffset struct {
	seq    uint64
	offset int64
}

// goneMax bounds the eviction index (16 bytes an entry).
const goneMax = 4096

// offsetFrom returns the output offset at which the first output event
// with seq >= seq begins (the end of the output if there is none), and
// whether that is known exactly.
func (r *ring) offsetFrom(seq uint64) (int64, bool) {
	i := sort.Search(len(r.gone), func(i int) bool { return r.gone[i].seq >= seq })
	if i < len(r.gone) {
		// Exact unless older entries were dropped and seq is before the
		// oldest kept one (or no entry ever recorded that region).
		exact := i > 0 || (!r.goneCut && r.gone[0].offset == 0)
		return r.gone[i].offset, exact
	}
	exact := len(r.gone) > 0 || r.evicted == 0
	for _, c := range r.live() {
		if c.Seq >= seq {
			return c.Offset, exact
		}
	}
	return r.end, exact
}

// outputMap is what the ring knows of the output's offsets beyond the
// events of a reply, for sizeMissing: its index of evicted events, its
// skipped offsets, and all it evicted as the bound of what is missing.
func (r *ring) outputMap() outputMap {
	return outputMap{at: r.offsetFrom, skipsIn: r.skipsIn, end: r.end, bound: r.evicted}
}

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
//
// A read stops where skipped offsets begin after output it returns (more
// is then true, also when no output follows them): the skip is reported
// by the read that starts there (see Job.Poll), which moves past it.
func (r *ring) read(cursor int64, max int64) (out []protocol.Chunk, next int64, more bool) {
	next = r.pastSkips(cursor)
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
		if len(out) > 0 && r.skipsIn(next, off) {
			return out, next, true
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
	if len(out) == 0 {
		return out, r.pastSkips(next), false
	}
	return out, next, r.skipsIn(next, r.end)
}

// poll is read as a poll result: what lies between cursor and the first
// byte returned is gone, evicted bytes (LostBytes) or offsets skipped
// after a supervisor crash (CrashGap), where the dead supervisor may have
// read output it never journaled (how much is not known: possibly none).
func (r *ring) poll(cursor, max int64) protocol.PollResult {
	var res protocol.PollResult
	res.Chunks, res.Next, res.More = r.read(cursor, max)
	if res.Chunks == nil {
		res.Chunks = []protocol.Chunk{}
	}
	first := res.Next
	if len(res.Chunks) > 0 {
		first = res.Chunks[0].Offset
	}
	if lost := r.span(cursor, min(r.from(), first)); lost > 0 {
		res.Truncated, res.LostBytes = true, lost
	}
	if r.skipsIn(cursor, first) {
		res.Truncated, res.CrashGap = true, true
	}
	return res
}

// pastSkips returns off, or the end of the skipped offsets off lies in
// (or starts).
func (r *ring) pastSkips(off int64) int64 {
	for _, s := range r.skips {
		if s.At <= off && off < s.At+s.N {
			off = s.At + s.N
		}
	}
	return off
}
