package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Nobody returns what runs a program as another user (uid and gid 65534,
// no groups: the setpriv command line to put before it) and a Python
// that user can run (/usr/bin/python3, not a shim in root's home). It
// skips t, saying why, when the test cannot do that here: not root, no
// setpriv (util-linux), no /usr/bin/python3.
func Nobody(t testing.TB) (asNobody []string, python string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a program as another uid (setpriv)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not installed: cannot run a program as another uid")
	}
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("no /usr/bin/python3 to run as another uid")
	}
	return []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}, py
}
