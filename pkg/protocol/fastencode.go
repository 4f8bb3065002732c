package protocol

// Hand-written msgpack encoders for the hot path (output events), each
// writing exactly what Marshal writes for the same value, into a buffer
// sized once. TestFastEncodeMatchesMarshal holds them to that.

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= 0xff:
		return append(b, 0xcc, byte(v))
	case v <= 0xffff:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v <= 0xffffffff:
		return append(b, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	return append(b, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func appendInt(b []byte, v int64) []byte {
	if v >= 0 {
		return appendUint(b, uint64(v))
	}
	switch {
	case v >= -32:
		return append(b, byte(int8(v)))
	case v >= -128:
		return append(b, 0xd0, byte(int8(v)))
	case v >= -32768:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= -2147483648:
		return append(b, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	u := uint64(v)
	return append(b, 0xd3, byte(u>>56), byte(u>>48), byte(u>>40), byte(u>>32), byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
}

func appendStr(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= 0xff:
		b = append(b, 0xd9, byte(n))
	case n <= 0xffff:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, d []byte) []byte {
	if d == nil {
		return append(b, 0xc0)
	}
	return append(appendBinHeader(b, len(d)), d...)
}

func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n <= 0xff:
		return append(b, 0xc4, byte(n))
	case n <= 0xffff:
		return append(b, 0xc5, byte(n>>8), byte(n))
	}
	return append(b, 0xc6, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
}

// OutputHeadroom is the room NewOutputEventInPlace needs before the data.
const OutputHeadroom = 32

// NewOutputEventInPlace builds the same event as NewOutputEvent for the
// data buf[OutputHeadroom:], without copying it: the payload header is
// written into the headroom just before the data, and the payload aliases
// buf (which must not change afterwards).
func NewOutputEventInPlace(jobID string, seq uint64, ts int64, kind Kind, offset int64, buf []byte) Event {
	var hdr [OutputHeadroom]byte
	h := append(hdr[:0], 0x82)
	h = appendStr(h, "offset")
	h = appendInt(h, offset)
	h = appendStr(h, "data")
	h = appendBinHeader(h, len(buf)-OutputHeadroom)
	start := OutputHeadroom - len(h)
	copy(buf[start:], h)
	return Event{V: Version, JobID: jobID, Seq: seq, Ts: ts, Kind: kind, Payload: buf[start:len(buf):len(buf)]}
}

// NewOutputEvent builds a job.stdout/job.stderr event like NewEvent with
// an OutputPayload, with one allocation and one copy of data.
func NewOutputEvent(jobID string, seq uint64, ts int64, kind Kind, offset int64, data []byte) Event {
	p := make([]byte, 0, len(data)+32)
	p = append(p, 0x82)
	p = appendStr(p, "offset")
	p = appendInt(p, offset)
	p = appendStr(p, "data")
	p = appendBin(p, data)
	return Event{V: Version, JobID: jobID, Seq: seq, Ts: ts, Kind: kind, Payload: p}
}

// AppendEventHeader appends the encoding of ev up to its payload: followed
// by ev.Payload (or nil, 0xc0) it is the whole event.
func AppendEventHeader(b []byte, ev *Event) []byte {
	if ev.Attempt != 0 {
		b = append(b, 0x87)
	} else {
		b = append(b, 0x86)
	}
	b = appendStr(b, "v")
	b = appendInt(b, int64(ev.V))
	b = appendStr(b, "jobId")
	b = appendStr(b, ev.JobID)
	b = appendStr(b, "seq")
	b = appendUint(b, ev.Seq)
	b = appendStr(b, "ts")
	b = appendInt(b, ev.Ts)
	b = appendStr(b, "kind")
	b = appendStr(b, string(ev.Kind))
	if ev.Attempt != 0 {
		b = appendStr(b, "attempt")
		b = appendInt(b, int64(ev.Attempt))
	}
	return appendStr(b, "payload")
}

// AppendEvent appends the msgpack encoding of ev to b (as Marshal(&ev)).
func AppendEvent(b []byte, ev *Event) []byte {
	b = AppendEventHeader(b, ev)
	if ev.Payload == nil {
		return append(b, 0xc0)
	}
	return append(b, ev.Payload...)
}

// EncodeEvent encodes ev into a buffer of the right size.
func EncodeEvent(ev *Event) []byte {
	return AppendEvent(make([]byte, 0, len(ev.Payload)+len(ev.JobID)+len(ev.Kind)+64), ev)
}
