package outlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/exec-supervisor/exec-supervisor/pkg/protocol"
)

// A segment file is a sequence of frames, each a fixed header and its
// data:
//
//	magic   1 byte  0xF6
//	kind    1 byte  1 stdout, 2 stderr, 3 skip
//	len     4 bytes data length (big endian, as every field)
//	aux     8 bytes output frames: the event's seq; skip: the offsets skipped
//	offset  8 bytes combined output offset of the first byte (of the skip)
//	ts      8 bytes output frames: the event's time (ms since the epoch)
//	attempt 4 bytes output frames: the service run the event belongs to
//	crc     4 bytes CRC-32C of the 34 bytes above and the data
//
// Frames of the first format (magic 0xF5: no ts and attempt, the crc
// after offset, a 26-byte header) are read as well, with ts and attempt
// 0; a segment may hold both. A skip frame (no data) says that the
// offsets [offset, offset+aux) never held output: a job resumed after
// its supervisor crashed goes on past every offset the dead supervisor
// may have published. A frame cut short or failing its CRC ends the
// segment (a write cut by a full disk or a crash); what follows it is
// not read.
const (
	headerLen   = 38
	magic       = 0xF6
	headerLenV1 = 26
	magicV1     = 0xF5

	kindStdout = 1
	kindStderr = 2
	kindSkip   = 3
)

// maxFrameData bounds what a header may claim (the file is input): output
// events are at most 1 MiB (--chunk-max-bytes).
const maxFrameData = 4 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// frame is one record: output of one stream at off (an output event's,
// with its seq, time and attempt), or a skip of span offsets at off.
type frame struct {
	kind    byte
	seq     uint64
	ts      int64
	attempt int
	off     int64
	span    int64 // skip frames only
	data    []byte
}

// end is the offset just past the frame.
func (f *frame) end() int64 {
	if f.kind == kindSkip {
		return f.off + f.span
	}
	return f.off + int64(len(f.data))
}

// size is the frame's length on disk.
func (f *frame) size() int64 { return headerLen + int64(len(f.data)) }

func kindOf(s protocol.Stream) byte {
	if s == protocol.Stderr {
		return kindStderr
	}
	return kindStdout
}

func streamOf(k byte) protocol.Stream {
	if k == kindStderr {
		return protocol.Stderr
	}
	return protocol.Stdout
}

// putHeader writes f's header (with the CRC of the header and f's data)
// into h, which is headerLen bytes: the frame on disk is h, then f.data.
func putHeader(h []byte, f *frame) {
	h[0], h[1] = magic, f.kind
	binary.BigEndian.PutUint32(h[2:6], uint32(len(f.data)))
	aux := f.seq
	if f.kind == kindSkip {
		aux = uint64(f.span)
	}
	binary.BigEndian.PutUint64(h[6:14], aux)
	binary.BigEndian.PutUint64(h[14:22], uint64(f.off))
	binary.BigEndian.PutUint64(h[22:30], uint64(f.ts))
	binary.BigEndian.PutUint32(h[30:34], uint32(f.attempt))
	crc := crc32.Update(crc32.Checksum(h[:34], crcTable), crcTable, f.data)
	binary.BigEndian.PutUint32(h[34:38], crc)
}

// errTorn says a frame was cut short or corrupt: the segment ends before it.
var errTorn = errors.New("torn or corrupt frame")

// scanner reads a segment's frames in order.
type scanner struct {
	r   *bufio.Reader
	pos int64 // file position of the next frame
	buf []byte
}

// next reads the next frame, checked; its data aliases the scanner's
// buffer (valid until the next call: copy what is kept). io.EOF at a
// frame boundary is the end; errTorn a frame cut short or corrupt (the
// valid part ends at s.pos).
func (s *scanner) next() (frame, error) {
	var h [headerLen]byte
	n, err := io.ReadFull(s.r, h[:headerLenV1])
	if err == io.EOF {
		return frame{}, io.EOF
	}
	if err != nil {
		if n > 0 && err == io.ErrUnexpectedEOF {
			return frame{}, errTorn
		}
		return frame{}, err
	}
	hl := headerLenV1
	switch h[0] {
	case magic:
		hl = headerLen
		if _, err := io.ReadFull(s.r, h[headerLenV1:]); err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return frame{}, errTorn
			}
			return frame{}, err
		}
	case magicV1:
	default:
		return frame{}, errTorn
	}
	if h[1] < kindStdout || h[1] > kindSkip {
		return frame{}, errTorn
	}
	f := frame{kind: h[1], off: int64(binary.BigEndian.Uint64(h[14:22]))}
	dlen := binary.BigEndian.Uint32(h[2:6])
	aux := binary.BigEndian.Uint64(h[6:14])
	if dlen > maxFrameData || f.off < 0 || f.off > 1<<62 || (f.kind == kindSkip && (dlen != 0 || aux > 1<<62)) {
		return frame{}, errTorn
	}
	if f.kind == kindSkip {
		f.span = int64(aux)
	} else {
		f.seq = aux
	}
	if hl == headerLen {
		f.ts = int64(binary.BigEndian.Uint64(h[22:30]))
		f.attempt = int(binary.BigEndian.Uint32(h[30:34]))
	}
	if cap(s.buf) < int(dlen) {
		s.buf = make([]byte, dlen)
	}
	f.data = s.buf[:dlen]
	if _, err := io.ReadFull(s.r, f.data); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return frame{}, errTorn
		}
		return frame{}, err
	}
	if crc32.Update(crc32.Checksum(h[:hl-4], crcTable), crcTable, f.data) != binary.BigEndian.Uint32(h[hl-4:hl]) {
		return frame{}, errTorn
	}
	s.pos += int64(hl) + int64(dlen)
	return f, nil
}

// segName is the file name of the segment whose first frame starts at off.
func segName(off int64) string { return fmt.Sprintf("%016x.seg", off) }

// parseSegName is segName's inverse.
func parseSegName(name string) (int64, bool) {
	if len(name) != 20 || name[16:] != ".seg" {
		return 0, false
	}
	var v int64
	for _, c := range name[:16] {
		var d int64
		switch {
		case '0' <= c && c <= '9':
			d = int64(c - '0')
		case 'a' <= c && c <= 'f':
			d = int64(c-'a') + 10
		default:
			return 0, false
		}
		v = v<<4 | d
	}
	return v, v >= 0
}
