package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// CompletionCommand prints a shell completion script.
type CompletionCommand struct{}

// Synopsis implements command.
func (*CompletionCommand) Synopsis() string {
	return "print a shell completion script: completion bash|zsh (e.g. source <(execctl completion bash))"
}

// flagName matches the flag a line of pflag's FlagUsages defines.
var flagName = regexp.MustCompile(`(?m)^ +(?:-[a-zA-Z], )?--([a-z][a-z-]+)`)

// commandFlags lists each command's flags, read from its own --help so
// that the script never drifts from the code.
func commandFlags(g *globals) map[string][]string {
	out := map[string][]string{}
	for name, cmd := range commands {
		var help bytes.Buffer
		gg := *g
		gg.stderr, gg.stdout = &help, &help
		_, _ = cmd.Run(context.Background(), &gg, []string{"--help"})
		seen := map[string]bool{}
		for _, m := range flagName.FindAllStringSubmatch(help.String(), -1) {
			if !seen[m[1]] && m[1] != "help" {
				seen[m[1]] = true
				out[name] = append(out[name], "--"+m[1])
			}
		}
		// (and the global flags, taken after the command too)
		for _, gf := range strings.Fields(globalFlagNames) {
			if !seen[gf[2:]] {
				out[name] = append(out[name], gf)
			}
		}
		sort.Strings(out[name])
	}
	return out
}

// globalFlagNames are the global flags completed (before the command, and
// after it with its own).
const globalFlagNames = "--control --event --endpoints-file --json --request-timeout --token-file"

// Run implements command.
func (*CompletionCommand) Run(ctx context.Context, g *globals, args []string) (int, error) {
	fs := newFlags("completion", g)
	if err := g.parse(fs, args); err != nil {
		return 0, err
	}
	args = fs.Args()
	if len(args) != 1 || (args[0] != "bash" && args[0] != "zsh") {
		return 0, &usageError{msg: "want bash or zsh", hint: "source <(execctl completion bash)"}
	}
	flags := commandFlags(g)
	cmds := strings.Join(order, " ")
	var cases strings.Builder
	for _, name := range order {
		fmt.Fprintf(&cases, "    %s) flags=%q ;;\n", name, strings.Join(flags[name], " "))
	}
	script := fmt.Sprintf(`# execctl completion (bash; zsh via bashcompinit)
_execctl() {
  local cur cmd="" i flags
  cur="${COMP_WORDS[COMP_CWORD]}"
  for ((i=1; i<COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in
      --control|--event|--endpoints-file|--request-timeout|--token-file) ((i++)) ;;
      -*) ;;
      *) cmd="${COMP_WORDS[i]}"; break ;;
    esac
  done
  if [[ -z "$cmd" ]]; then
    COMPREPLY=( $(compgen -W "%s %s" -- "$cur") )
    return
  fi
  case "$cmd" in
%s    *) flags="" ;;
  esac
  if [[ "$cmd" == "spawn" && "${COMP_WORDS[COMP_CWORD-1]}" == "--restart" ]]; then
    COMPREPLY=( $(compgen -W "never on-failure always" -- "$cur") )
  elif [[ "$cur" == -* ]]; then
    COMPREPLY=( $(compgen -W "$flags" -- "$cur") )
  elif [[ "$cmd" == "completion" ]]; then
    COMPREPLY=( $(compgen -W "bash zsh" -- "$cur") )
  else
    COMPREPLY=( $(compgen -W "$(execctl list 2>/dev/null | awk 'NR>1{print $1; if ($2 != "-") print $2}')" -- "$cur") )
  fi
}
`, cmds, globalFlagNames, cases.String())
	if args[0] == "zsh" {
		script = "autoload -U +X bashcompinit && bashcompinit\n" + script
	}
	script += "complete -F _execctl execctl\n"
	_, err := fmt.Fprint(g.stdout, script)
	return exitOK, err
}
