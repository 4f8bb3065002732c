package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// suggest returns what word probably meant of candidates: the only one
// word begins ("hist": history), else the closest, if at most 2 edits
// away (and closer than word is long: no guesses for "x"); "" if none.
// The first of equally close candidates wins.
func suggest(word string, candidates []string) string {
	var prefixed []string
	for _, c := range candidates {
		if len(word) > 1 && strings.HasPrefix(c, word) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(word, c); d < bestD && d < len([]rune(word)) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance of a and b (optimal
// string alignment: insertions, deletions, substitutions and swaps of
// two neighbours, each 1).
func editDistance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// d[i][j] is the distance of s[:i] and t[:j]
	d := make([][]int, len(s)+1)
	for i := range d {
		d[i] = make([]int, len(t)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(s); i++ {
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(s)][len(t)]
}

// unknownFlagHint is "; did you mean --x?" for a flag err says fs does
// not have, when one of fs's flags is close ("-json" for "--json" too);
// "" otherwise.
func unknownFlagHint(fs *pflag.FlagSet, err error) string {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) {
		return ""
	}
	var names []string
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	short := ne.GetSpecifiedShortnames()
	if short != "" {
		// (-json: a long flag with one dash, read as -j -s -o -n, or
		// -follow as -f -o ...: short names the rest from the unknown one)
		if len(short) < 2 {
			return ""
		}
		if fs.Lookup(short) != nil {
			return fmt.Sprintf("; did you mean --%s?", short)
		}
	}
	word := ne.GetSpecifiedName()
	if short != "" {
		word = short
	}
	if s := suggest(word, names); s != "" {
		return fmt.Sprintf("; did you mean --%s?", s)
	}
	return ""
}
