package outlog

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// maxIovecs bounds the pieces of one writev(2) (the kernel's IOV_MAX is
// 1024).
const maxIovecs = 1024

// writev writes the pieces of bufs (none of them empty) to f in order,
// with as few writev(2) as the kernel allows: frames go from the jobs'
// output buffers to the file without a copy into a buffer of ours. It
// returns how many bytes were written (all of them unless err). bufs is
// consumed.
func writev(f *os.File, bufs [][]byte) (int64, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("writev: %w", err)
	}
	var written int64
	for len(bufs) > 0 {
		var n int
		var werr error
		if cerr := rc.Write(func(fd uintptr) bool {
			n, werr = unix.Writev(int(fd), bufs[:min(len(bufs), maxIovecs)])
			return werr != unix.EAGAIN // (a regular file never says so)
		}); cerr != nil {
			return written, cerr
		}
		if werr == unix.EINTR {
			continue
		}
		if werr != nil {
			return written, werr
		}
		if n == 0 {
			return written, io.ErrShortWrite
		}
		written += int64(n)
		for n > 0 {
			if n < len(bufs[0]) {
				bufs[0] = bufs[0][n:]
				break
			}
			n -= len(bufs[0])
			bufs = bufs[1:]
		}
	}
	return written, nil
}
