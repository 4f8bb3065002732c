package main

// examples are shown by 'execctl COMMAND --help'.
var examples = map[string]string{
	"spawn": "execctl spawn --follow -- make test\n  execctl spawn --name build --label team=infra -- make   # then: execctl logs -f build\n  execctl spawn --timeout 5m --no-output-timeout 30s --shell 'npm ci && npm test'\n  id=$(execctl spawn --pty -- python3 -i)\n" +
		"  execctl spawn --restart on-failure --max-restarts 0 --limit-nofile 4096 -- ./server --port 8080\n" +
		"  execctl spawn --restart always --restart-delay 500ms --notify --watchdog 30s --memory-max 512M -- ./daemon",
	"wait":         "execctl wait JOB1 JOB2; echo \"last exit: $?\"",
	"logs":         "execctl logs -f JOB1 JOB2",
	"kill":         "execctl kill JOB\n  execctl kill JOB1 JOB2 JOB3\n  execctl kill --label team=ci\n  execctl kill --signal SIGINT JOB",
	"write":        "execctl write JOB 'print(1+1)'\n  cat input.txt | execctl write --eof JOB -",
	"send-keys":    "execctl send-keys JOB C-c\n  execctl send-keys JOB Up Enter",
	"status":       "execctl status JOB\n  execctl --json status JOB | jq .job.usage",
	"list":         "execctl list --state running\n  execctl list --name 'build-*' --label team=infra --label env=prod",
	"start":        "execctl start JOB   # after restart-limit or stop; at once while it waits to restart",
	"restart":      "execctl restart JOB",
	"stop":         "execctl stop JOB",
	"history":      "execctl history --lines 5 JOB\n  execctl --json history JOB | jq '.runs[] | {attempt, reason, exitCode}'",
	"top":          "execctl top --interval 1s",
	"daemon":       "execctl daemon start -- --max-jobs 100\n  execctl daemon status --crashes 3\n  execctl daemon stop",
	"curve-keygen": "execctl curve-keygen ~/.config/exec-supervisor/client.key   # then add the printed key to the supervisor's curve-clients",
}
