package main

import (
	"bytes"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// useColor reports whether output to w may be coloured: only on a
// terminal, and not when NO_COLOR is set to anything (no-color.org).
func useColor(w io.Writer) bool {
	return os.Getenv("NO_COLOR") == "" && isTTY(w)
}

// makeCbreak puts the terminal in cbreak mode (keys are read as typed,
// not echoed; Ctrl-C still interrupts) and returns a function that
// restores it (safe to call twice).
func makeCbreak(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	cb := *old
	cb.Lflag &^= unix.ICANON | unix.ECHO
	cb.Cc[unix.VMIN] = 1
	cb.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &cb); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }) }, nil
}

// watchKey returns a channel closed when one of keys is typed on the
// terminal in (in cbreak mode meanwhile), and stop, which stops
// watching and gives the terminal back as it was.
func watchKey(in *os.File, keys string) (typed <-chan struct{}, stop func(), err error) {
	fd := int(in.Fd())
	restore, err := makeCbreak(fd)
	if err != nil {
		return nil, nil, err
	}
	// (read through a non-blocking handle: closing it ends the Read)
	input, err := pollableDup(fd)
	if err != nil {
		restore()
		return nil, nil, err
	}
	ch, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64)
		for {
			n, err := input.Read(buf)
			if bytes.ContainsAny(buf[:n], keys) {
				close(ch)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch, func() {
		input.Close()
		<-done
		_ = unix.SetNonblock(fd, false) // (pollableDup's fallback shares the flag)
		restore()
	}, nil
}

// background reports whether this process is in the background of
// terminal fd (its controlling terminal, another process group in the
// foreground): setting the terminal's mode would stop it (SIGTTOU).
func background(fd int) bool {
	pg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pg != unix.Getpgrp()
}
