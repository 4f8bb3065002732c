package client

import (
	"crypto/rand"
	"encoding/hex"
	"hash/fnv"
	"math"
	"sort"
)

// Placement of a Pool's spawns, and the member tag in the job ids it
// chooses. Pure functions of their arguments (no I/O, no clock), so that
// placement can be tested on its own and is the same in every process.

// rendezvousScore is session's weight on the member of key (highest
// random weight hashing): each session ranks the members in an order of
// its own, the same in every process and across restarts, and a member
// joining or leaving moves only the sessions it wins or held (about 1/N).
func rendezvousScore(session, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(session))
	return mix64(h.Sum64())
}

// mix64 is splitmix64's finalizer: FNV's low bits are poorly mixed for
// short, similar inputs (host:port strings).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// rankForSession orders keys by session's rendezvous score, best first
// (ties, which need a 64-bit collision, by key).
func rankForSession(session string, keys []string) []string {
	ranked := append([]string(nil), keys...)
	sort.Slice(ranked, func(i, j int) bool {
		si, sj := rendezvousScore(session, ranked[i]), rendezvousScore(session, ranked[j])
		if si != sj {
			return si > sj
		}
		return ranked[i] < ranked[j]
	})
	return ranked
}

// memberLoad is what least-loaded placement knows of a member.
type memberLoad struct {
	key            string
	active, queued int // from its last health, plus spawns answered since
	inflight       int // spawns sent to it and not yet answered
	maxJobs        int // 0: unknown (no limit assumed)
}

// load is the member's busy fraction (jobs running or on their way over
// its limit); a member of unknown limit counts its jobs against 10000.
func (l memberLoad) load() float64 {
	limit := l.maxJobs
	if limit <= 0 {
		limit = 10000
	}
	return float64(l.active+l.queued+l.inflight) / float64(limit)
}

// leastLoaded returns the key of the least loaded member ("" if none);
// ties go to the fewest jobs, then to the smallest key.
func leastLoaded(loads []memberLoad) string {
	best, bestLoad := -1, math.Inf(1)
	for i, l := range loads {
		ld := l.load()
		switch {
		case best < 0 || ld < bestLoad:
		case ld == bestLoad && l.active+l.inflight < loads[best].active+loads[best].inflight:
		case ld == bestLoad && l.active+l.inflight == loads[best].active+loads[best].inflight && l.key < loads[best].key:
		default:
			continue
		}
		best, bestLoad = i, ld
	}
	if best < 0 {
		return ""
	}
	return loads[best].key
}

// Job ids a Pool chooses are "p" + the member's tag (8 hex digits) + "-" +
// 16 random hex digits: the tag says which supervisor holds the job, in
// this process and in the next one.
const (
	poolTagLen = 9  // "p" + 8 hex digits
	poolIDLen  = 26 // tag, "-", 16 hex digits
)

// memberTag is the tag of the member whose control endpoint is key.
func memberTag(key string) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	var b [4]byte
	s := h.Sum32()
	b[0], b[1], b[2], b[3] = byte(s>>24), byte(s>>16), byte(s>>8), byte(s)
	return "p" + hex.EncodeToString(b[:])
}

// newPoolJobID returns a fresh job id tagged for the member of tag.
func newPoolJobID(tag string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return tag + "-" + hex.EncodeToString(b[:])
}

// tagOf returns the member tag of a job id a Pool chose ("" for another id
// or a name).
func tagOf(id string) string {
	if len(id) != poolIDLen || id[0] != 'p' || id[poolTagLen] != '-' {
		return ""
	}
	for i := 1; i < len(id); i++ {
		if i == poolTagLen {
			continue
		}
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
	}
	return id[:poolTagLen]
}
