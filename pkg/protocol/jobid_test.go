package protocol

import (
	"strings"
	"testing"
)

// TestValidJobIDChoice: the ids a caller may choose at spawn.
func TestValidJobIDChoice(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"build-42", true},
		{"1d655e68-aae0-43d2-adc7-b47c81f1b37e", true},
		{"test-job-1700000000000", true},
		{"ns:job_1.2", true},
		{"j-0123456789abcdef", true}, // (the supervisor's shape: allowed)
		{strings.Repeat("x", MaxIDBytes), true},
		{"", false},
		{strings.Repeat("x", MaxIDBytes+1), false},
		{".", false},
		{"..", false},
		{"-rf", false},
		{"_x", false},
		{":x", false},
		{"a/b", false},  // topics: job/a/ would match job/a/b/
		{"a b", false},  // command lines
		{"a\nb", false}, // logs
		{"a\x00", false},
		{"é", false},
		{"a\xff", false},
		{"a*", false},
		{`a"`, false},
	} {
		err := ValidJobIDChoice(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidJobIDChoice(%q) = %v, want ok %v", tc.id, err, tc.ok)
		}
		if err != nil && CodeOf(err) != CodeInvalidArgument {
			t.Errorf("ValidJobIDChoice(%q): code %s, want invalid-argument", tc.id, CodeOf(err))
		}
	}
}

// TestSpawnArgsJobID: jobId round-trips through the request codec (fast
// and generic paths) and is validated by DecodeArgs.
func TestSpawnArgsJobID(t *testing.T) {
	for _, a := range []SpawnArgs{
		{JobID: "build-42", Argv: []string{"true"}},
		{JobID: "build-42", Argv: []string{"true"}, Pty: &PtyArgs{}}, // (the generic decoder)
	} {
		body, err := EncodeRequest("r1", OpSpawn, &a)
		if err != nil {
			t.Fatal(err)
		}
		req, err := DecodeRequest(body, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got SpawnArgs
		if err := DecodeArgs(req, &got); err != nil {
			t.Fatal(err)
		}
		if got.JobID != "build-42" {
			t.Fatalf("jobId decoded as %q", got.JobID)
		}
	}
	body, _ := EncodeRequest("r2", OpSpawn, &SpawnArgs{JobID: "../x", Argv: []string{"true"}})
	req, err := DecodeRequest(body, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeArgs(req, &SpawnArgs{}); CodeOf(err) != CodeInvalidArgument || !strings.Contains(err.Error(), "jobId") {
		t.Fatalf("a bad chosen id: %v, want invalid-argument naming jobId", err)
	}
}
