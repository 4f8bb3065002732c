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
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		key, val, ok := strings.Cut(text, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || key == "" {
			return fmt.Errorf("--config: %s:%d: want 'option = value', got %q", path, line, text)
		}
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		if key == "config" || fs.Lookup(key) == nil {
			return fmt.Errorf("--config: %s:%d: unknown option %q (options are the flag names, e.g. max-jobs)", path, line, key)
		}
		if fromCLI[key] {
			continue
		}
		if err := fs.Set(key, val); err != nil {
			return fmt.Errorf("--config: %s:%d: %s: %w", path, line, key, err)
		}
	}
	return sc.Err()
}
