package protocol

import (
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeReplyNoCopy decodes a reply like DecodeReply, but its Result
// aliases b instead of being copied (a backfill reply carries megabytes
// of output): b must not be modified afterwards.
func DecodeReplyNoCopy(b []byte) (*Reply, error) {
	r, ok := fastReply(b)
	if !ok {
		return DecodeReply(b)
	}
	if !r.OK && r.Error == nil {
		return nil, Errorf(CodeBadRequest, "reply is neither ok nor error")
	}
	return r, nil
}

func (m *mp) arrLen() (int, error) { return m.length(0x90, 0xdc, true) }

// span skips one value and returns its encoding (aliasing m.b).
func (m *mp) span() ([]byte, error) {
	start := m.i
	if err := m.skip(0); err != nil {
		return nil, err
	}
	return m.b[start:m.i:m.i], nil
}

func fastReply(b []byte) (*Reply, bool) {
	m := mp{b: b}
	var r Reply
	ok := m.fields(func(key []byte) bool {
		switch string(key) {
		case "v":
			v, ok := m.intIn(math.MinInt32, math.MaxInt32)
			r.V = int(v)
			return ok
		case "id":
			return m.strTo(&r.ID)
		case "ok": // true or false only (anything else: the generic decoder)
			c, err := m.byte()
			r.OK = c == 0xc3
			return err == nil && (c == 0xc2 || c == 0xc3)
		case "result":
			return m.rawTo(&r.Result)
		case "error":
			var raw msgpack.RawMessage
			if !m.rawTo(&raw) {
				return false
			}
			if raw != nil {
				var e Error
				if unmarshal(raw, &e, "error") != nil {
					return false
				}
				r.Error = &e
			}
			return true
		}
		return m.skipped()
	})
	if !ok || m.i != len(b) {
		return nil, false
	}
	return &r, true
}

// DecodeSubscribeResult decodes the result of a subscribe reply. Its
// events' payloads alias b (no copy of the output they carry): b must not
// be modified afterwards.
func DecodeSubscribeResult(b []byte) (*SubscribeResult, error) {
	if r, ok := fastSubscribeResult(b); ok {
		return r, nil
	}
	var r SubscribeResult
	if err := unmarshal(b, &r, "subscribe result"); err != nil {
		return nil, err
	}
	return &r, nil
}

// minEventBytes is the size of the smallest event fastEvent accepts: a
// map of one entry, "kind", with a one-byte kind (81 a4 'kind' a1 x).
const minEventBytes = 8

func fastSubscribeResult(b []byte) (*SubscribeResult, bool) {
	m := mp{b: b}
	var r SubscribeResult
	ok := m.fields(func(key []byte) bool {
		if string(key) == "events" {
			// An event fastEvent takes is at least minEventBytes long:
			// a count the bytes left cannot hold is declined before it
			// sizes the slice.
			cnt, err := m.arrLen()
			if err != nil || cnt > (len(b)-m.i)/minEventBytes ||
				cnt > maxSmallList && cnt > (len(b)-m.i)/bigElemBytes { // (as checkValue)
				return false
			}
			r.Events = make([]Event, 0, cnt)
			for ; cnt > 0; cnt-- {
				raw, err := m.span()
				if err != nil {
					return false
				}
				ev, ok := fastEvent(raw)
				if !ok {
					return false
				}
				r.Events = append(r.Events, *ev)
			}
			return true
		}
		raw, err := m.span()
		if err != nil {
			return false
		}
		var dst any
		switch string(key) {
		case "job":
			dst = &r.Job
		case "missing":
			dst = &r.Missing
		case "missingBytes":
			dst = &r.MissingBytes
		case "more":
			dst = &r.More
		case "instanceId":
			dst = &r.InstanceID
		case "heartbeatIntervalMs":
			dst = &r.HeartbeatIntervalMs
		default:
			return true
		}
		return unmarshal(raw, dst, "subscribe result") == nil
	})
	if !ok || m.i != len(b) {
		return nil, false
	}
	return &r, true
}
