package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// LoadConfigFile applies a configuration file to fs: one "option = value"
// per line, options named as the flags without dashes ("max-jobs = 20"),
// "#" comments, repeated options (allow-uid) accumulate. A flag given on
// the command line wins over the file; the file wins over the defaults.
// Unknown options and bad values are errors naming the file and line.
func LoadConfigFile(fs *pflag.FlagSet, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return fmt.Errorf("--config: read %s: %w", path, err)
	}
	if len(b) > 1<<20 {
		return fmt.Errorf("--config: %s is larger than 1 MiB", path)
	}
	fromCLI := map[string]bool{}
	fs.Visit(func(fl *pflag.Flag) { fromCLI[fl.Name] = true })
	setAt := map[string]int{} // line each option was set on
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1) // (a line may be as long as the file)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, val, ok := strings.Cut(text, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || key == "" {
			return fmt.Errorf("--config: %s:%d: want 'option = value', got %.80q", path, line, text)
		}
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		} else if strings.HasPrefix(val, "'") {
			return fmt.Errorf("--config: %s:%d: %s: single quotes are not quoting here (use double quotes, or none)", path, line, key)
		} else if strings.Contains(val, " #") || strings.Contains(val, "\t#") {
			return fmt.Errorf("--config: %s:%d: %s: a comment after the value (comments go on lines of their own; quote a value that holds \" #\")", path, line, key)
		}
		if key == "config" || key == "version" || key == "help" || fs.Lookup(key) == nil {
			return fmt.Errorf("--config: %s:%d: unknown option %.80q (options are the flag names, e.g. max-jobs)", path, line, key)
		}
		if prev, twice := setAt[key]; twice && !repeatable(fs.Lookup(key)) {
			return fmt.Errorf("--config: %s:%d: %s is set again (line %d sets it too)", path, line, key, prev)
		}
		setAt[key] = line
		if fromCLI[key] {
			continue
		}
		if err := fs.Set(key, val); err != nil {
			return fmt.Errorf("--config: %s:%d: %s: %w", path, line, key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--config: read %s: %w", path, err)
	}
	return nil
}

// repeatable reports whether a flag accumulates its values (a list, as
// allow-uid) rather than taking the last one.
func repeatable(fl *pflag.Flag) bool {
	return strings.HasSuffix(fl.Value.Type(), "Slice") || strings.HasSuffix(fl.Value.Type(), "Array")
}
