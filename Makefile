# exec-supervisor — see README.md
GO ?= go
BIN ?= bin

.PHONY: build test test-short chaos soak bench lint fuzz run clean

# Recipes run in bash with pipefail: a test run piped into its report
# fails when the tests fail.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -ec

build:
	$(GO) build -o $(BIN)/ ./cmd/exec-supervisor ./cmd/execctl

# The whole suite, exactly what CI runs (.ci/run).
test:
	$(GO) vet ./...
	@.ci/cgroup-bases > .cgroup-bases-before
	@# (testreport: each package's result, failed tests' output, and at
	@# the end every skipped test with its reason)
	$(GO) test -race -count=1 -timeout 15m -json ./... 2>&1 | $(GO) run ./internal/testreport
	@# The journal crash test once more without -race: the race detector
	@# slows encoding so much that kills rarely land inside a write.
	$(GO) test -count=1 -run 'TestCrashSafety' ./internal/journal/
	@# No test may leave a supervisor's job cgroup base behind.
	@.ci/cgroup-bases | comm -13 .cgroup-bases-before - > .cgroup-bases-left; rm -f .cgroup-bases-before; \
	if [ -s .cgroup-bases-left ]; then echo "FAIL: tests left job cgroup bases behind:"; cat .cgroup-bases-left; rm -f .cgroup-bases-left; exit 1; fi; \
	rm -f .cgroup-bases-left

# Long runs: the 200 MB byte-exact delivery test and friends.
soak:
	EXEC_SUPERVISOR_SOAK=1 $(GO) test -race -count=1 -timeout 30m -run 'TestByteExact|TestSlowSubscriber' -v ./pkg/client/ ./internal/server/ ./cmd/exec-supervisor/

# The quick suite: everything but the chaos suite and the long runs.
test-short:
	$(GO) test -short -count=1 ./...

# The chaos suite alone: real supervisor binaries killed (-9) and
# restarted, journals torn, orphans reaped. make test runs it too.
chaos:
	$(GO) test -race -count=1 -timeout 15m ./cmd/exec-supervisor/

# Benchmarks, each printed with its same-run baseline, then the same figures
# as a markdown section for docs/benchmarks.md (.ci/bench-table). BENCH picks
# benchmarks by name (make bench BENCH=SpawnTrueBinary). The exit status is
# go test's.
bench: BENCH ?= .
bench:
	@set -o pipefail; out=$$(mktemp); trap 'rm -f "$$out"' EXIT; status=0; \
	{ set -x; \
	  $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 2s -count 1 ./internal/jobs/ ./internal/server/ ./internal/zmtp/ ./cmd/exec-supervisor/ ./pkg/protocol/ && \
	  $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 5x -count 1 ./pkg/client/; \
	} 2>&1 | tee "$$out" || status=$$?; \
	echo; echo '---- for docs/benchmarks.md ----'; echo; \
	.ci/bench-table "make bench$(if $(filter-out .,$(BENCH)), BENCH=$(BENCH))" < "$$out"; \
	exit $$status

lint:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeRequest -fuzztime 60s ./pkg/protocol/
	$(GO) test -run '^$$' -fuzz FuzzFastDecodeMatchesGeneric -fuzztime 60s ./pkg/protocol/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeReply$$' -fuzztime 60s ./pkg/protocol/
	$(GO) test -run '^$$' -fuzz FuzzParseIntents -fuzztime 60s ./internal/journal/
	$(GO) test -run '^$$' -fuzz FuzzHandle -fuzztime 60s ./internal/openclaw/
	$(GO) test -run '^$$' -fuzz FuzzDecodeOutput -fuzztime 60s ./internal/openclaw/

# Run a supervisor in the foreground on the private default endpoints.
run: build
	$(BIN)/exec-supervisor

clean:
	rm -rf $(BIN)
