package protocol

import "math"

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
	n, err := m.mapLen()
	if err != nil {
		return nil, false
	}
	var r Reply
	for ; n > 0; n-- {
		key, err := m.bytes()
		if err != nil {
			return nil, false
		}
		switch string(key) {
		case "v":
			v, err := m.int()
			if err != nil || v > math.MaxInt32 || v < math.MinInt32 {
				return nil, false
			}
			r.V = int(v)
		case "id":
			s, err := m.bytes()
			if err != nil {
				return nil, false
			}
			r.ID = string(s)
		case "ok":
			c, err := m.byte()
			if err != nil || (c != 0xc2 && c != 0xc3) {
				return nil, false
			}
			r.OK = c == 0xc3
		case "result":
			raw, err := m.span()
			if err != nil {
				return nil, false
			}
			if len(raw) == 1 && raw[0] == 0xc0 {
				raw = nil
			}
			r.Result = raw
		case "error":
			raw, err := m.span()
			if err != nil {
				return nil, false
			}
			if !(len(raw) == 1 && raw[0] == 0xc0) {
				var e Error
				if unmarshal(raw, &e, "error") != nil {
					return nil, false
				}
				r.Error = &e
			}
		default:
			if err := m.skip(0); err != nil {
				return nil, false
			}
		}
	}
	if m.i != len(b) {
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

func fastSubscribeResult(b []byte) (*SubscribeResult, bool) {
	m := mp{b: b}
	n, err := m.mapLen()
	if err != nil {
		return nil, false
	}
	var r SubscribeResult
	for ; n > 0; n-- {
		key, err := m.bytes()
		if err != nil {
			return nil, false
		}
		if string(key) == "events" {
			cnt, err := m.arrLen()
			if err != nil || cnt > len(b) {
				return nil, false
			}
			r.Events = make([]Event, 0, cnt)
			for ; cnt > 0; cnt-- {
				raw, err := m.span()
				if err != nil {
					return nil, false
				}
				ev, ok := fastEvent(raw)
				if !ok {
					return nil, false
				}
				r.Events = append(r.Events, *ev)
			}
			continue
		}
		raw, err := m.span()
		if err != nil {
			return nil, false
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
		default:
			continue
		}
		if unmarshal(raw, dst, "subscribe result") != nil {
			return nil, false
		}
	}
	if m.i != len(b) {
		return nil, false
	}
	return &r, true
}
