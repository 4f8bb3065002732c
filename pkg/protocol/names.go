package protocol

import (
	"path"
	"strings"
	"unicode/utf8"
)

// MaxNameBytes is the longest job name (SpawnArgs.Name).
const MaxNameBytes = 64

// MaxNamePatternBytes is the longest name pattern of a list-jobs filter.
const MaxNamePatternBytes = 128

// ValidJobName checks a job name (SpawnArgs.Name): 1..MaxNameBytes bytes
// of ASCII letters, digits and "._:-", starting with a letter or digit,
// and not beginning with "j-" (in any case), the shape of the
// supervisor's own ids and of their abbreviations: a name can never be
// taken for a generated id. The set is a job id's (ValidJobIDChoice), so
// a name is as safe on command lines, in logs and file names; it holds no
// glob metacharacter, so a name pattern without one matches one name.
func ValidJobName(name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return Errorf(CodeInvalidArgument, "name must be 1..%d bytes (got %d)", MaxNameBytes, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || !strings.ContainsRune("._:-", rune(c))) {
			return Errorf(CodeInvalidArgument, "name %.64q: byte %d (%q) is not allowed: a name is ASCII letters, digits and . _ : - (starting with a letter or digit)", name, i, name[i:i+1])
		}
	}
	if len(name) >= 2 && strings.EqualFold(name[:2], "j-") {
		return Errorf(CodeInvalidArgument, "name %.64q begins with \"j-\", as the supervisor's job ids do: choose another", name)
	}
	return nil
}

// ValidNamePattern checks a list-jobs name filter: a glob (path.Match's:
// * any run of characters, ? one, [...] a class, \ escapes) of at most
// MaxNamePatternBytes of valid UTF-8.
func ValidNamePattern(pattern string) error {
	if len(pattern) > MaxNamePatternBytes || !utf8.ValidString(pattern) {
		return Errorf(CodeInvalidArgument, "name pattern must be valid UTF-8 of at most %d bytes", MaxNamePatternBytes)
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return Errorf(CodeInvalidArgument, "name pattern %.64q is not a valid glob: %v", pattern, err)
	}
	return nil
}

// MatchName reports whether a job of that name (empty: none) passes a
// list-jobs name filter (ValidNamePattern): an empty pattern passes
// every job, any other only named jobs whose name it matches.
func MatchName(pattern, name string) bool {
	if pattern == "" {
		return true
	}
	if name == "" {
		return false
	}
	ok, _ := path.Match(pattern, name)
	return ok
}

// MatchLabels reports whether labels hold every key of want with its
// value (an empty want passes every job).
func MatchLabels(want, labels map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// validLabels checks a label map against the protocol's limits (spawn's
// labels, list-jobs' label filter).
func validLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Errorf(CodeTooLarge, "%d labels; the limit is %d", len(labels), MaxLabels)
	}
	for k, v := range labels {
		if len(k) == 0 || len(k) > MaxLabelBytes || len(v) > MaxLabelBytes {
			return Errorf(CodeInvalidArgument, "label keys must be 1..%d bytes and values at most %d", MaxLabelBytes, MaxLabelBytes)
		}
	}
	return nil
}
