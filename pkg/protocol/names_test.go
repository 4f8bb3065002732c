package protocol

import (
	"strings"
	"testing"
)

// TestValidJobName: the names a spawn may give; malformed, oversized and
// hostile ones are invalid-argument, as are names shaped like the
// supervisor's ids or their abbreviations ("j-...").
func TestValidJobName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"build", true}, {"Build.2", true}, {"web:prod", true}, {"a", true}, {"0", true}, {"deadbeef", true},
		{"a_b-c.d", true}, {strings.Repeat("x", MaxNameBytes), true}, {"jx-1", true}, {"j", true}, {"j_1", true},
		{"", false}, {strings.Repeat("x", MaxNameBytes+1), false},
		{"j-", false}, {"j-1f2e3d4c5b6a7980", false}, {"J-build", false}, {"j-build", false},
		{"-rf", false}, {".", false}, {"..", false}, {"_x", false}, {"a b", false}, {"a/b", false},
		{"a*", false}, {"a?", false}, {"[a]", false}, {"a\x00", false}, {"a\n", false}, {"a\x1b[2J", false},
		{"caf\u00e9", false}, {"a\xff", false}, {"\xc3\x28", false}, {"a'b", false}, {`a"b`, false}, {"a$b", false},
	} {
		err := ValidJobName(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("ValidJobName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && CodeOf(err) != CodeInvalidArgument {
			t.Errorf("ValidJobName(%q): code %s, want invalid-argument", tc.name, CodeOf(err))
		}
		a := SpawnArgs{Name: tc.name, Argv: []string{"true"}}
		if err := a.Validate(); tc.name != "" && (err == nil) != tc.ok {
			t.Errorf("spawn with name %q: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestListFilters: list-jobs' name pattern and label filter, their limits
// and their matching.
func TestListFilters(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		ok      bool
	}{
		{"", true}, {"build", true}, {"build-*", true}, {"web-?", true}, {"[a-c]*", true}, {`a\*`, true},
		{"[", false}, {"a[", false}, {`a\`, false}, {"\xff*", false}, {strings.Repeat("*", MaxNamePatternBytes+1), false},
	} {
		a := ListJobsArgs{Name: tc.pattern}
		if err := a.Validate(); (err == nil) != tc.ok || err != nil && CodeOf(err) != CodeInvalidArgument {
			t.Errorf("list-jobs name %q: %v, want ok %v", tc.pattern, err, tc.ok)
		}
	}
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	if a := (ListJobsArgs{Labels: many}); CodeOf(a.Validate()) != CodeTooLarge {
		t.Errorf("list-jobs with %d labels: %v, want too-large", len(many), a.Validate())
	}
	if a := (ListJobsArgs{Labels: map[string]string{"": "x"}}); CodeOf(a.Validate()) != CodeInvalidArgument {
		t.Errorf("list-jobs with an empty label key: %v", a.Validate())
	}
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"", "", true}, {"", "build", true}, {"*", "", false}, {"*", "build", true},
		{"build", "build", true}, {"build", "build-2", false}, {"build-*", "build-2", true}, {"b?ild", "build", true},
	} {
		if got := MatchName(tc.pattern, tc.name); got != tc.want {
			t.Errorf("MatchName(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	labels := map[string]string{"team": "infra", "env": "prod"}
	for _, tc := range []struct {
		want map[string]string
		ok   bool
	}{
		{nil, true}, {map[string]string{"team": "infra"}, true}, {map[string]string{"team": "infra", "env": "prod"}, true},
		{map[string]string{"team": "infra", "env": "dev"}, false}, {map[string]string{"owner": ""}, false},
	} {
		if got := MatchLabels(tc.want, labels); got != tc.ok {
			t.Errorf("MatchLabels(%v) = %v, want %v", tc.want, got, tc.ok)
		}
	}
}
