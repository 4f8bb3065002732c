package openclaw

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime/metrics"
	"unicode/utf8"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// Config configures a Handler. Every field may be left zero.
type Config struct {
	// MaxRequestBytes bounds a request body; 0 means
	// protocol.MaxRequestBytes (as for native requests).
	MaxRequestBytes int
	// EventsDropped returns how many events were dropped at the event
	// queue's bound since the supervisor started (health's
	// eventsDropped); nil reports 0.
	EventsDropped func() uint64
	// JobsStarted returns how many jobs the supervisor started since it
	// started (health's totalJobsProcessed, as the Node server counts
	// its spawns); nil reports the jobs it knows (health's totalJobs).
	JobsStarted func() uint64
	// HeapBytes returns the live heap of the process (health's
	// memoryUsageMB); nil reads it from runtime/metrics.
	HeapBytes func() uint64
	// SyncSubscriptions, called before a spawn, puts in force the event
	// subscriptions clients sent before the request, so that a gateway
	// that subscribes to exec:<jobId> and then spawns the job gets its
	// job.started; nil does nothing.
	SyncSubscriptions func()
	// Log gets bad requests at debug level; nil discards.
	Log *slog.Logger
}

// Handler answers dialect requests. It holds no state of its own: it is
// safe for concurrent use.
type Handler struct {
	cfg Config
	log *slog.Logger
}

// NewHandler returns a Handler with cfg.
func NewHandler(cfg Config) *Handler {
	if cfg.MaxRequestBytes <= 0 || cfg.MaxRequestBytes > protocol.MaxRequestBytes {
		cfg.MaxRequestBytes = protocol.MaxRequestBytes
	}
	if cfg.HeapBytes == nil {
		cfg.HeapBytes = heapBytes
	}
	if cfg.SyncSubscriptions == nil {
		cfg.SyncSubscriptions = func() {}
	}
	if cfg.EventsDropped == nil {
		cfg.EventsDropped = func() uint64 { return 0 }
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, log: log}
}

// IsDialect reports whether a control request body is one of the
// dialect's: JSON text starts with '{', which no msgpack map does (0x7b
// is the msgpack integer 123).
func IsDialect(body []byte) bool { return len(body) > 0 && body[0] == '{' }

// Handle answers one request body (see IsDialect) with its JSON reply,
// running what it asks through n. It always returns exactly one reply:
// a request that is not JSON, too large, of an unknown type or with
// arguments of the wrong type gets a reply typed "health" with success
// false and an error saying why, as the Node server answers what it
// cannot handle (its clients' REQ sockets would otherwise wait for
// ever).
func (h *Handler) Handle(n Native, body []byte) (out []byte) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("panic in openclaw request handler", "panic", r)
			out = marshal(badRequest("internal error"))
		}
	}()
	r, err := h.decode(body)
	if err != nil {
		h.log.Debug("bad openclaw request", "err", err)
		return marshal(badRequest(err.Error()))
	}
	var reply any
	switch r.Type {
	case typeSpawn:
		reply = h.spawn(n, r)
	case typePoll:
		reply = h.poll(n, r)
	case typeKill:
		reply = h.kill(n, r)
	case typeStatus:
		reply = h.status(n, r)
	case typeHealth:
		reply = h.health(n)
	case typeSubscribe:
		reply = h.subscribe(n, r)
	case typeListJobs:
		reply = h.listJobs(n)
	case "":
		reply = badRequest("request has no type")
	default:
		reply = badRequest(fmt.Sprintf("unknown request type %.64q", r.Type))
	}
	return marshal(reply)
}

// decode checks and decodes a request body. Unknown fields are ignored
// (as by the Node server); a known one of the wrong type is an error.
func (h *Handler) decode(body []byte) (*request, error) {
	if len(body) > h.cfg.MaxRequestBytes {
		return nil, fmt.Errorf("request of %d bytes; the limit is %d", len(body), h.cfg.MaxRequestBytes)
	}
	if !utf8.Valid(body) {
		// (encoding/json would turn such bytes into U+FFFD: a command
		// must not run as something else than was sent)
		return nil, fmt.Errorf("request is not valid UTF-8 (JSON text must be)")
	}
	var r request
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("malformed JSON request: %w", err)
	}
	return &r, nil
}

// BadRequest is the reply to a dialect request that cannot be handled at
// all (msg says why): typed "health", success false, as Handle answers
// malformed requests.
func BadRequest(msg string) []byte { return marshal(badRequest(msg)) }

func badRequest(msg string) badRequestReply {
	return badRequestReply{Type: typeHealth, Error: msg}
}

// heapBytes is the process's live heap, read without stopping the world.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
