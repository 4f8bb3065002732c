package zmtp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// frameParser follows the ZMTP 3 byte stream a peer sends: the 64-byte
// greeting, then frames (flags, 1- or 8-byte size, body). It rejects a
// frame larger than max as soon as its size is known. During the
// handshake it collects each command and, at the command that ends the
// peer's side of the handshake (READY or INITIATE), checks its metadata:
// well formed, with a Socket-Type the engine accepts. (The engine drops,
// without closing, a connection it refuses at that point.)
type frameParser struct {
	max             uint64
	finalCmd        string
	peerTypes       []string
	pos             uint64 // bytes of the greeting consumed
	hdr             [9]byte
	hdrN, hdrLen    int
	remain          uint64 // body bytes left in the current frame
	isCmd           bool
	cmd             []byte // the current handshake command's body
	handshakeDone   bool
	deadlineCleared bool
}

const maxHandshakeCmd = 4096

func (f *frameParser) feed(b []byte) error {
	for len(b) > 0 {
		if f.pos < greetingLen {
			k := min(uint64(len(b)), greetingLen-f.pos)
			f.pos += k
			b = b[k:]
			continue
		}
		if f.remain > 0 {
			k := min(uint64(len(b)), f.remain)
			if f.isCmd && !f.handshakeDone {
				f.cmd = append(f.cmd, b[:k]...)
			}
			f.remain -= k
			b = b[k:]
			if f.remain == 0 && f.isCmd && !f.handshakeDone {
				if err := f.command(); err != nil {
					return err
				}
			}
			continue
		}
		// Frame header.
		if f.hdrN == 0 {
			f.hdr[0] = b[0]
			f.hdrN = 1
			f.hdrLen = 2
			if b[0]&flagLong != 0 {
				f.hdrLen = 9
			}
			b = b[1:]
			continue
		}
		k := min(len(b), f.hdrLen-f.hdrN)
		copy(f.hdr[f.hdrN:], b[:k])
		f.hdrN += k
		b = b[k:]
		if f.hdrN < f.hdrLen {
			continue
		}
		size := uint64(f.hdr[1])
		if f.hdrLen == 9 {
			size = binary.BigEndian.Uint64(f.hdr[1:9])
		}
		if size > f.max {
			return &violation{"frame-too-large", fmt.Errorf("peer announced a frame of %d bytes; the limit is %d", size, f.max)}
		}
		f.isCmd = f.hdr[0]&flagCommand != 0
		f.hdrN = 0
		f.remain = size
		if f.isCmd && !f.handshakeDone {
			if size > maxHandshakeCmd {
				return &violation{"frame-too-large", fmt.Errorf("handshake command of %d bytes", size)}
			}
			f.cmd = f.cmd[:0]
			if size == 0 {
				if err := f.command(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// command checks a complete handshake command.
func (f *frameParser) command() error {
	name, props := cmdName(f.cmd)
	if name != f.finalCmd {
		return nil
	}
	if err := checkPeerMetadata(props, f.peerTypes); err != nil {
		return err
	}
	f.handshakeDone = true
	return nil
}

// checkPeerMetadata checks the metadata a peer ends its handshake with:
// well formed, with a Socket-Type among peerTypes (if any).
func checkPeerMetadata(props []byte, peerTypes []string) error {
	meta, err := parseMetadata(props)
	if err != nil {
		return &violation{"protocol-violation", err}
	}
	if len(peerTypes) > 0 {
		st := meta["socket-type"]
		ok := false
		for _, t := range peerTypes {
			ok = ok || t == st
		}
		if !ok {
			return &violation{"incompatible-socket-type", fmt.Errorf("peer socket type %.32q cannot talk to this socket (want one of %v)", st, peerTypes)}
		}
	}
	return nil
}

// parseMetadata reads ZMTP metadata: [name len][name][4-byte value len][value]...
func parseMetadata(b []byte) (map[string]string, error) {
	m := map[string]string{}
	for len(b) > 0 {
		n := int(b[0])
		if len(b) < 1+n+4 {
			return nil, errors.New("truncated metadata")
		}
		name := strings.ToLower(string(b[1 : 1+n]))
		b = b[1+n:]
		vl := binary.BigEndian.Uint32(b[:4])
		b = b[4:]
		if uint64(vl) > uint64(len(b)) {
			return nil, errors.New("truncated metadata value")
		}
		m[name] = string(b[:vl])
		b = b[vl:]
	}
	return m, nil
}

// violation is a peer's protocol violation with the reason it is counted under.
type violation struct {
	reason string
	err    error
}

func (v *violation) Error() string { return v.reason + ": " + v.err.Error() }
