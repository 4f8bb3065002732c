package main

import (
	"io"
	"os"
)

// useColor reports whether output to w may be coloured: only on a
// terminal, and not when NO_COLOR is set to anything (no-color.org).
func useColor(w io.Writer) bool {
	return os.Getenv("NO_COLOR") == "" && isTTY(w)
}
