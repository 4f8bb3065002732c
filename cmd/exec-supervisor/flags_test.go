package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestInvalidFlags: a bad value is refused before anything starts, with
// exit code 2 and a message naming the flag.
func TestInvalidFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-finished-jobs", "0"}, "--max-finished-jobs"},
		{[]string{"--max-finished-jobs", "-5"}, "--max-finished-jobs"},
		{[]string{"--max-finished-output", "1000"}, "--max-finished-output"},
		{[]string{"--max-finished-output", "lots"}, "max-finished-output"},
		{[]string{"--max-jobs", "0"}, "--max-jobs"},
		{[]string{"--ring-buffer", "10"}, "--ring-buffer"},
		{[]string{"--finished-job-retention", "0s"}, "--finished-job-retention"},
		{[]string{"--reply-queue-bytes", "1000"}, "--reply-queue-bytes"},
		{[]string{"--allow-uid", "-1"}, "--allow-uid"},
		{[]string{"--allow-gid", "4294967295"}, "--allow-gid"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
		{[]string{"--metrics-addr", "notanaddr"}, "--metrics-addr"},
		{[]string{"--metrics-addr", "127.0.0.1:99999"}, "--metrics-addr"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", tc.args, code, stderr.String(), tc.want)
		}
	}
}
