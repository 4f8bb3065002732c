package protocol

import (
	"errors"
	"math"
)

// DecodeEventNoCopy decodes an event like DecodeEvent, but its Payload
// aliases b instead of being copied: b must not be modified afterwards.
// It falls back to DecodeEvent for encodings it does not handle itself.
func DecodeEventNoCopy(b []byte) (*Event, error) {
	if ev, ok := fastEvent(b); ok {
		return ev, nil
	}
	return DecodeEvent(b)
}

// Output decodes the payload of a job.stdout or job.stderr event without
// copying: Data aliases the event's payload.
func (e *Event) Output() (OutputPayload, error) {
	if p, ok := fastOutput(e.Payload); ok {
		return p, nil
	}
	var p OutputPayload
	err := e.DecodePayload(&p)
	return p, err
}

var errMP = errors.New("msgpack")

// mp is a minimal msgpack reader for the shapes this package writes. Every
// method checks bounds; any surprise is an error (the caller falls back).
type mp struct {
	b []byte
	i int
	// strict: strings read (str, strSliceValue, strStrMapValue) must
	// be valid UTF-8, as those of requests (see checkUTF8).
	strict bool
}

func (m *mp) byte() (byte, error) {
	if m.i >= len(m.b) {
		return 0, errMP
	}
	c := m.b[m.i]
	m.i++
	return c, nil
}

func (m *mp) n(k int) ([]byte, error) {
	if k < 0 || k > len(m.b)-m.i {
		return nil, errMP
	}
	s := m.b[m.i : m.i+k]
	m.i += k
	return s, nil
}

func (m *mp) be(k int) (uint64, error) {
	s, err := m.n(k)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range s {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

func (m *mp) mapLen() (int, error) { return m.length(0x80, 0xde, false) }

// length reads the element count of a map (fix 0x80, 16-bit 0xde, 32-bit
// 0xdf) or an array (0x90, 0xdc, 0xdd; nil allowed: empty).
func (m *mp) length(fix, c16 byte, nilOK bool) (int, error) {
	c, err := m.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case c >= fix && c <= fix+0x0f:
		return int(c & 0x0f), nil
	case c == c16:
		v, err := m.be(2)
		return int(v), err
	case c == c16+1:
		v, err := m.be(4)
		if v > math.MaxInt32 {
			return 0, errMP
		}
		return int(v), err
	case c == 0xc0 && nilOK:
		return 0, nil
	}
	return 0, errMP
}

// bytes reads a str or bin value.
func (m *mp) bytes() ([]byte, error) {
	c, err := m.byte()
	if err != nil {
		return nil, err
	}
	var k uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		k = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		k, err = m.be(1)
	case c == 0xda || c == 0xc5:
		k, err = m.be(2)
	case c == 0xdb || c == 0xc6:
		k, err = m.be(4)
	case c == 0xc0: // nil: an empty value
		return nil, nil
	default:
		return nil, errMP
	}
	if err != nil || k > uint64(len(m.b)) {
		return nil, errMP
	}
	return m.n(int(k))
}

// int reads an integer (any msgpack int encoding).
func (m *mp) int() (int64, error) {
	c, err := m.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		v, err := m.be(1 << (c - 0xcc))
		if v > math.MaxInt64 {
			return 0, errMP
		}
		return int64(v), err
	case 0xd0:
		v, err := m.be(1)
		return int64(int8(v)), err
	case 0xd1:
		v, err := m.be(2)
		return int64(int16(v)), err
	case 0xd2:
		v, err := m.be(4)
		return int64(int32(v)), err
	case 0xd3:
		v, err := m.be(8)
		return int64(v), err
	case 0xc0:
		return 0, nil
	}
	return 0, errMP
}

// skip passes over one value of any type but ext; depth bounds nesting.
func (m *mp) skip(depth int) error {
	if depth > 64 {
		return errMP
	}
	c, err := m.byte()
	if err != nil {
		return err
	}
	var k uint64
	elems := 0
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return nil
	case c >= 0x80 && c <= 0x8f:
		elems = 2 * int(c&0x0f)
	case c >= 0x90 && c <= 0x9f:
		elems = int(c & 0x0f)
	case c >= 0xa0 && c <= 0xbf:
		_, err = m.n(int(c & 0x1f))
		return err
	case c == 0xc1, c >= 0xc7 && c <= 0xc9, c >= 0xd4 && c <= 0xd8:
		// Never valid (0xc1), or an ext, which the protocol does not
		// use and unmarshal refuses (see checkValue): whatever the fast
		// paths accept, the generic decoder must accept too.
		return errMP
	}
	switch c {
	case 0xc4, 0xd9:
		k, err = m.be(1)
	case 0xc5, 0xda:
		k, err = m.be(2)
	case 0xc6, 0xdb:
		k, err = m.be(4)
	case 0xcc, 0xd0:
		_, err = m.n(1)
		return err
	case 0xcd, 0xd1:
		_, err = m.n(2)
		return err
	case 0xca, 0xce, 0xd2:
		_, err = m.n(4)
		return err
	case 0xcb, 0xcf, 0xd3:
		_, err = m.n(8)
		return err
	case 0xdc, 0xdd:
		v, err := m.be(2 << (c - 0xdc))
		if err != nil || v > uint64(len(m.b)) {
			return errMP
		}
		elems = int(v)
	case 0xde, 0xdf:
		v, err := m.be(2 << (c - 0xde))
		if err != nil || v > uint64(len(m.b)) {
			return errMP
		}
		elems = 2 * int(v)
	}
	if err != nil {
		return err
	}
	if k > 0 {
		if k > uint64(len(m.b)) {
			return errMP
		}
		_, err = m.n(int(k))
		return err
	}
	for ; elems > 0; elems-- {
		if err := m.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

func fastEvent(b []byte) (*Event, bool) {
	m := mp{b: b}
	var ev Event
	ok := m.fields(func(key []byte) bool {
		var ok bool
		var v int64
		switch string(key) {
		case "v":
			ok = m.intTo(&ev.V)
		case "jobId":
			ok = m.strTo(&ev.JobID)
		case "seq":
			v, ok = m.intIn(0, math.MaxInt64)
			ev.Seq = uint64(v)
		case "ts":
			ok = m.i64To(&ev.Ts)
		case "kind":
			var k string
			k, ok = m.str()
			ev.Kind = Kind(k)
		case "attempt":
			v, ok = m.intIn(0, 1<<31-1)
			ev.Attempt = int(v)
		case "payload":
			ev.Payload, ok = m.spanOK()
		default:
			ok = m.skipped()
		}
		return ok
	})
	if !ok || m.i != len(b) || ev.Kind == "" {
		return nil, false
	}
	return &ev, true
}

func fastOutput(b []byte) (OutputPayload, bool) {
	m := mp{b: b}
	var p OutputPayload
	ok := m.fields(func(key []byte) bool {
		switch string(key) {
		case "offset":
			return m.i64To(&p.Offset)
		case "data":
			d, err := m.bytes()
			p.Data = d[:len(d):len(d)]
			return err == nil
		}
		return m.skipped()
	})
	if !ok || m.i != len(b) {
		return OutputPayload{}, false
	}
	return p, true
}
