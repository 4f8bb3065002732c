package protocol

import (
	"math"
	"strings"
	"testing"
)

// TestServiceSpawnValidation: every malformed or hostile service field is
// refused with invalid-argument and a message naming the field.
func TestServiceSpawnValidation(t *testing.T) {
	neg, huge, zero := -1, 2_000_000, 0
	nice := 20
	for _, c := range []struct {
		name string
		a    SpawnArgs
		want string
	}{
		{"policy", SpawnArgs{Restart: &RestartPolicy{Policy: "sometimes"}}, "restart.policy"},
		{"negative delay", SpawnArgs{Restart: &RestartPolicy{Policy: RestartAlways, RestartDelayMs: -5}}, "restart.restartDelayMs"},
		{"huge window", SpawnArgs{Restart: &RestartPolicy{Policy: RestartAlways, RestartWindowMs: MaxTimeoutMs + 1}}, "restart.restartWindowMs"},
		{"NaN multiplier", SpawnArgs{Restart: &RestartPolicy{Policy: RestartAlways, BackoffMultiplier: math.NaN()}}, "backoffMultiplier"},
		{"shrinking multiplier", SpawnArgs{Restart: &RestartPolicy{Policy: RestartAlways, BackoffMultiplier: 0.5}}, "backoffMultiplier"},
		{"inf multiplier", SpawnArgs{Restart: &RestartPolicy{Policy: RestartAlways, BackoffMultiplier: math.Inf(1)}}, "backoffMultiplier"},
		{"negative max restarts", SpawnArgs{Restart: &RestartPolicy{Policy: RestartAlways, MaxRestarts: &neg}}, "maxRestarts"},
		{"huge max restarts", SpawnArgs{Restart: &RestartPolicy{Policy: RestartAlways, MaxRestarts: &huge}}, "maxRestarts"},
		{"watchdog without notify", SpawnArgs{WatchdogIntervalMs: 1000}, "watchdogIntervalMs needs notify"},
		{"negative watchdog", SpawnArgs{Notify: true, WatchdogIntervalMs: -1}, "watchdogIntervalMs"},
		{"NOTIFY_SOCKET in env", SpawnArgs{Notify: true, Env: map[string]string{"NOTIFY_SOCKET": "/tmp/x"}}, "NOTIFY_SOCKET"},
		{"WATCHDOG_USEC in env", SpawnArgs{Notify: true, Env: map[string]string{"WATCHDOG_USEC": "1"}}, "WATCHDOG_USEC"},
		{"nice", SpawnArgs{Limits: &ResourceLimits{Nice: &nice}}, "limits.nice"},
		{"tiny address space", SpawnArgs{Limits: &ResourceLimits{MaxAddressSpaceBytes: 4096}}, "maxAddressSpaceBytes"},
		{"open files", SpawnArgs{Limits: &ResourceLimits{MaxOpenFiles: 1 << 30}}, "maxOpenFiles"},
		{"memory", SpawnArgs{Limits: &ResourceLimits{MemoryMaxBytes: -1}}, "memoryMaxBytes"},
		{"cpu weight", SpawnArgs{Limits: &ResourceLimits{CPUWeight: 10001}}, "cpuWeight"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.a.Argv = []string{"true"}
			err := c.a.Validate()
			if CodeOf(err) != CodeInvalidArgument || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v; want invalid-argument mentioning %q", err, c.want)
			}
		})
	}
	ok := SpawnArgs{Argv: []string{"true"}, Notify: true, WatchdogIntervalMs: 500,
		Restart: &RestartPolicy{Policy: RestartOnFailure, MaxRestarts: &zero, BackoffMultiplier: 1.5},
		Limits:  &ResourceLimits{MaxOpenFiles: 64, MaxAddressSpaceBytes: 1 << 30, MemoryMaxBytes: 1 << 28, CPUWeight: 50}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid service spawn refused: %v", err)
	}
	d := RestartPolicy{Policy: RestartAlways}.WithDefaults()
	if d.RestartDelayMs != 1000 || d.BackoffMultiplier != 2 || d.MaxDelayMs != 300000 || d.ResetAfterMs != 300000 || *d.MaxRestarts != 5 || d.RestartWindowMs != 300000 {
		t.Fatalf("defaults %+v", d)
	}
}
