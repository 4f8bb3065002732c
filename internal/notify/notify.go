// Package notify is the receiving side of the systemd notification
// protocol (sd_notify(3)): a supervised job is given NOTIFY_SOCKET and sends
// datagrams such as "READY=1", "STATUS=...", "WATCHDOG=1", "STOPPING=1" or
// "MAINPID=..." to it.
//
// One Socket serves one job. Every datagram carries the sender's
// credentials, attached and verified by the kernel (SO_PASSCRED); the caller
// decides from the sender pid whether a message is accepted. Note that a
// sender with CAP_SYS_ADMIN (such as root) may state any pid in explicit
// SCM_CREDENTIALS. systemd-notify(1) does so even without --pid: it claims
// its parent's pid, so as root its messages arrive with the pid of the
// script that ran it, while unprivileged (the claim refused) they arrive
// with its own short-lived pid. Its BARRIER=1 datagram always carries its
// own pid.
//
// File descriptors sent along with a message (SCM_RIGHTS, as used by
// FDSTORE=1 and by sd_notify_barrier(3)) are not kept: they are closed as
// soon as the datagram is read. Closing them is what completes a sender's
// barrier.
//
// The package does no logging; it counts what it drops (Socket.Rejected).
package notify

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxMessage is the largest datagram body accepted, in bytes. The reader
// reads at most this many bytes; a larger datagram is truncated by the
// kernel, detected through MSG_TRUNC and rejected as a whole. Parse rejects
// longer bodies too.
const MaxMessage = 4096

// maxSunPath is the longest socket path that fits in sun_path with its
// terminating NUL byte.
const maxSunPath = 107

// abstractPrefix starts the name of the abstract socket used in place of a
// path too long for sun_path.
const abstractPrefix = "@exec-supervisor/"

// scmMaxFD is the kernel's limit on descriptors in one datagram
// (SCM_MAX_FD); the control buffer has room for all of them, so none are
// discarded by a control-data truncation that we could not see.
const scmMaxFD = 253

// Message is one datagram received from an accepted sender.
type Message struct {
	// Pid is the sender pid from SCM_CREDENTIALS, as verified by the
	// kernel and translated into the receiver's pid namespace.
	Pid int
	// Uid is the sender's user id from SCM_CREDENTIALS.
	Uid uint32
	// Gid is the sender's group id from SCM_CREDENTIALS.
	Gid uint32
	// Fields holds the datagram's KEY=VALUE lines; of duplicate keys the
	// later one wins. It is never nil.
	Fields map[string]string
}

// Ready reports whether the message carries READY=1.
func (m Message) Ready() bool { return m.Fields["READY"] == "1" }

// Watchdog reports whether the message carries WATCHDOG=1.
func (m Message) Watchdog() bool { return m.Fields["WATCHDOG"] == "1" }

// Stopping reports whether the message carries STOPPING=1.
func (m Message) Stopping() bool { return m.Fields["STOPPING"] == "1" }

// Status returns the STATUS field and whether the message has one.
func (m Message) Status() (string, bool) {
	v, ok := m.Fields["STATUS"]
	return v, ok
}

// Socket is a bound notification socket with its reader goroutine. Create
// it with Listen and release it with Close.
type Socket struct {
	file *os.File
	// addr is the NOTIFY_SOCKET value.
	addr string
	// path is the socket file to remove on Close, "" for an abstract
	// socket; dev and ino identify the file we created, so that Close never
	// removes a file that replaced it.
	path     string
	dev, ino uint64

	accept func(pid int) bool
	handle func(Message)

	rejected atomic.Uint64
	done     chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Listen binds a datagram socket for the notification protocol at path,
// enables SO_PASSCRED on it and starts one goroutine that reads datagrams
// until Close.
//
// A relative path is made absolute, since NOTIFY_SOCKET must be absolute.
// The socket file is made mode 0666 so that a job running as another user
// can send to it; who is listened to is decided by accept, not by file
// permissions. A stale socket file left at path by a dead process is
// replaced; any other existing file is an error. A path longer than the 107
// bytes sun_path can hold is replaced by an abstract socket named "@" plus
// a short name derived deterministically from path (see Addr); a path
// starting with "@" names an abstract socket directly. Abstract sockets
// belong to the network namespace and have no permissions at all.
//
// For each datagram, in this order: descriptors passed with it are closed;
// it is dropped if it has no sender credentials, was truncated (longer than
// MaxMessage) or had its control data truncated; accept is called with the
// sender pid and the datagram dropped if it returns false; it is dropped if
// Parse fails; otherwise handle is called with the message. accept and
// handle are called from the reader goroutine only, one call at a time, and
// must not call Close. A slow handle delays later datagrams, which queue in
// the socket buffer and are lost (the sender gets EAGAIN or blocks) when it
// is full.
func Listen(path string, accept func(pid int) bool, handle func(Message)) (*Socket, error) {
	if accept == nil || handle == nil {
		return nil, errors.New("notify: listen: accept and handle must not be nil")
	}
	if path == "" || strings.IndexByte(path, 0) >= 0 {
		return nil, fmt.Errorf("notify: listen: invalid socket path %q", path)
	}
	abstract := path[0] == '@'
	if !abstract {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("notify: listen %q: %w", path, err)
		}
		path = abs
	}
	addr := path
	if len(path) > maxSunPath {
		sum := sha256.Sum256([]byte(path))
		addr = abstractPrefix + hex.EncodeToString(sum[:])[:16]
		abstract = true
	}

	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("notify: socket: %w", err)
	}
	// Credentials are attached at send time only if the receiver asks for
	// them, so ask before the address exists.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("notify: setsockopt SO_PASSCRED: %w", err)
	}
	if err := bindSocket(fd, addr, abstract); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s := &Socket{
		addr:   addr,
		accept: accept,
		handle: handle,
		done:   make(chan struct{}),
	}
	if !abstract {
		var st unix.Stat_t
		if err := unix.Lstat(addr, &st); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("notify: stat %q: %w", addr, err)
		}
		s.path, s.dev, s.ino = addr, st.Dev, st.Ino
		if err := os.Chmod(addr, 0o666); err != nil {
			unix.Close(fd)
			s.removeFile()
			return nil, fmt.Errorf("notify: chmod %q: %w", addr, err)
		}
	}
	// The descriptor is non-blocking, so os.NewFile registers it with the
	// runtime poller: reads park the goroutine, and Close wakes it.
	s.file = os.NewFile(uintptr(fd), addr)
	rc, err := s.file.SyscallConn()
	if err != nil {
		s.file.Close()
		s.removeFile()
		return nil, fmt.Errorf("notify: %q: %w", addr, err)
	}
	go s.run(rc)
	return s, nil
}

// bindSocket binds fd to addr. A socket file at addr that nobody listens
// on any more is removed and the bind retried once.
func bindSocket(fd int, addr string, abstract bool) error {
	sa := &unix.SockaddrUnix{Name: addr}
	err := unix.Bind(fd, sa)
	if err == unix.EADDRINUSE && !abstract && stale(addr) {
		if rerr := os.Remove(addr); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("notify: remove stale socket %q: %w", addr, rerr)
		}
		err = unix.Bind(fd, sa)
	}
	if err != nil {
		return fmt.Errorf("notify: bind %q: %w", addr, err)
	}
	return nil
}

// stale reports whether path is a datagram socket file that refuses
// connections, i.e. one whose owner is gone.
func stale(path string) bool {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return false
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: path}) == unix.ECONNREFUSED
}

// RemoveStale removes the socket files in dir that nobody listens on any
// more (a crashed supervisor's: each of its notify jobs left one, and a
// service resumed after a crash binds a new name), and reports how many.
// Nothing else in dir is touched; a missing dir is no error.
func RemoveStale(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("notify: %w", err)
	}
	n := 0
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if e.Type()&os.ModeSocket == 0 || !stale(p) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, fmt.Errorf("notify: remove stale socket: %w", err)
		}
		n++
	}
	return n, nil
}

// Addr returns the value to give the job as NOTIFY_SOCKET: the absolute
// socket path, or "@name" for an abstract socket.
func (s *Socket) Addr() string { return s.addr }

// Rejected returns how many datagrams were dropped because the sender was
// not accepted, had no credentials, or the datagram was malformed or
// truncated.
func (s *Socket) Rejected() uint64 { return s.rejected.Load() }

// Close stops the reader goroutine, waits for it to end, closes the socket
// and removes the socket file. Datagrams not yet read are discarded. Close
// waits for a running accept or handle call to return, so it must not be
// called from them, nor while holding a lock they take. It is idempotent;
// later calls return the first call's result.
func (s *Socket) Close() error {
	s.closeOnce.Do(func() {
		// Closing the file wakes the reader; the descriptor itself is
		// released only once the reader's pending read has returned.
		err := s.file.Close()
		<-s.done
		if rerr := s.removeFile(); err == nil {
			err = rerr
		}
		if err != nil {
			s.closeErr = fmt.Errorf("notify: close %q: %w", s.addr, err)
		}
	})
	return s.closeErr
}

// removeFile removes the socket file if it is still the one Listen created.
func (s *Socket) removeFile() error {
	if s.path == "" {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(s.path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Dev != s.dev || st.Ino != s.ino {
		return nil
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// run is the reader goroutine.
func (s *Socket) run(rc syscall.RawConn) {
	defer close(s.done)
	buf := make([]byte, MaxMessage)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(4*scmMaxFD))
	for {
		var n, oobn, flags int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			for {
				n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob,
					unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
				if rerr != unix.EINTR {
					return rerr != unix.EAGAIN
				}
			}
		})
		if err != nil {
			return // closed
		}
		// Descriptors may have arrived even if decoding the sender address
		// failed; never leak them.
		var cred *unix.Ucred
		ctrlOK := true
		if oobn > 0 {
			cred, ctrlOK = readControl(oob[:oobn])
		}
		if rerr != nil {
			if oobn > 0 || n > 0 {
				s.rejected.Add(1)
			}
			continue
		}
		s.deliver(buf[:n], cred, ctrlOK, flags)
	}
}

// deliver applies the checks to one received datagram and hands it on.
func (s *Socket) deliver(body []byte, cred *unix.Ucred, ctrlOK bool, flags int) {
	if !ctrlOK || cred == nil || cred.Pid <= 0 || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		s.rejected.Add(1)
		return
	}
	if !s.accept(int(cred.Pid)) {
		s.rejected.Add(1)
		return
	}
	fields, err := Parse(body)
	if err != nil {
		s.rejected.Add(1)
		return
	}
	s.handle(Message{Pid: int(cred.Pid), Uid: cred.Uid, Gid: cred.Gid, Fields: fields})
}

// readControl walks the control messages of one datagram, closes every
// descriptor passed with it and returns the sender credentials, if any.
// ok is false if the control data could not be walked to its end.
func readControl(b []byte) (cred *unix.Ucred, ok bool) {
	for len(b) > 0 {
		if len(b) < unix.CmsgLen(0) {
			return cred, false
		}
		hdr, data, rest, err := unix.ParseOneSocketControlMessage(b)
		if err != nil {
			return cred, false
		}
		if hdr.Level == unix.SOL_SOCKET {
			switch hdr.Type {
			case unix.SCM_RIGHTS:
				for len(data) >= 4 {
					if fd := int32(binary.NativeEndian.Uint32(data)); fd >= 0 {
						unix.Close(int(fd))
					}
					data = data[4:]
				}
			case unix.SCM_CREDENTIALS:
				if cred == nil && len(data) >= unix.SizeofUcred {
					m := unix.SocketControlMessage{Header: hdr, Data: data}
					if c, err := unix.ParseUnixCredentials(&m); err == nil {
						cred = c
					}
				}
			}
		}
		b = rest
	}
	return cred, true
}

// Parse parses a notification datagram body: KEY=VALUE lines separated by
// newlines, empty lines ignored, a later duplicate key overriding an
// earlier one. A key must be non-empty and consist of A-Z, 0-9 and '_'.
// A line without '=', an invalid key, a NUL byte anywhere, or a body longer
// than MaxMessage makes the body malformed and Parse returns an error. The
// map is never nil on success.
func Parse(b []byte) (map[string]string, error) {
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("notify: message of %d bytes exceeds %d", len(b), MaxMessage)
	}
	if bytes.IndexByte(b, 0) >= 0 {
		return nil, errors.New("notify: message contains a NUL byte")
	}
	fields := make(map[string]string)
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		key, value, found := bytes.Cut(line, []byte{'='})
		if !found {
			return nil, fmt.Errorf("notify: line %q has no '='", truncate(line))
		}
		if !validKey(key) {
			return nil, fmt.Errorf("notify: invalid key %q", truncate(key))
		}
		fields[string(key)] = string(value)
	}
	return fields, nil
}

// validKey reports whether k is a non-empty run of A-Z, 0-9 and '_'.
func validKey(k []byte) bool {
	if len(k) == 0 {
		return false
	}
	for _, c := range k {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// truncate shortens b for an error message.
func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
