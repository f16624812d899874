# Targets match the README. `make test` is what CI runs.

GOLANGCI_LINT_VERSION := v2.15.0
GOBIN := $(shell go env GOPATH)/bin
GOLANGCI_LINT := $(GOBIN)/golangci-lint

.PHONY: test check deps lint race fuzz model mutants bench bench-peers perf demo compose-smoke chaos-soak

## test: formatting, vet, lint, every test with the race detector (needs redis-server; installed when missing), fuzzing, the protocol model, mutants
test: check race fuzz model mutants

# The nested modules, kept out of core's module graph: OpenTelemetry
# (otel) and its example, and the rueidis, valkey-go and redigo adapters
# (each runs drivertest in its tests). Each requires the core at a
# released version, so that a user can fetch it; scripts/nested.sh runs a
# command in one against this checkout's core instead (docs/release.md).
NESTED := otel examples/observability drivers/rueidis drivers/valkey drivers/redigo

# A developer's go.work (for an editor) changes neither the core's targets
# nor the nested modules': go test ./... at the root would test the nested
# modules' packages too.
export GOWORK := off

check: lint deps
	@unformatted=$$(gofmt -l .); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...
	go run ./internal/docscheck
	go run ./internal/examplecheck
	cd bench/peers && go vet . && go test -count=1 -run '^$$' .
	for m in $(NESTED); do \
		scripts/nested.sh $$m go vet ./... || exit 1; \
		scripts/nested.sh $$m go mod tidy -diff || { echo "tidy it: scripts/nested.sh $$m go mod tidy"; exit 1; }; \
	done

## deps: go.mod/go.sum tidy, a consumer's module graph lean, the release's modules fetchable by a consumer, govulncheck (skipped where its database is unreachable)
deps:
	go mod tidy -diff
	scripts/check-module-graph.sh
	scripts/check-release.sh $(NESTED)
	scripts/govulncheck.sh

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
	for m in $(NESTED); do scripts/nested.sh $$m $(GOLANGCI_LINT) run ./... || exit 1; done

$(GOLANGCI_LINT):
	go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

## race: every test under -race but internal/model's (make model runs them; the model is one goroutine); internal/engine's in RACE_SHARDS processes side by side (default 2)
race:
	scripts/ensure-redis.sh
	scripts/race.sh
	for m in $(NESTED); do scripts/nested.sh $$m go test -race -count=1 ./... || exit 1; done

## fuzz: a short run of the fuzz targets, 30,000 inputs each (longer: make fuzz FUZZTIME=5000000x)
# A count, not a duration: with a duration, Go up to 1.26 can fail a run at
# its end with a bare "context deadline exceeded" and no failing input
# (golang/go#75804, a race in the fuzzing coordinator; seen in our CI).
FUZZTIME ?= 30000x
fuzz:
	go test -run '^$$' -fuzz FuzzValidity -fuzztime $(FUZZTIME) ./internal/engine
	go test -run '^$$' -fuzz FuzzParseNotice -fuzztime $(FUZZTIME) ./internal/engine

## model: the model checker explores the protocol core's interleavings (internal/model; the hand-off world too); deeper: make model HORIZON=5; one world with restarts and Extend: make model WORLD=all
HORIZON ?= 0
WORLD ?=
model:
	go test -count=1 -timeout 0 -v ./internal/model -args -model.horizon=$(HORIZON) -model.world=$(WORLD)

## mutants: deliberate bugs, one at a time; each must make the tests named for it fail
mutants:
	scripts/ensure-redis.sh
	go run ./internal/mutants

## chaos-soak: the fault suite's random soaks (in one process, and across processes with porcupine) and its whole-API fault generator for longer
## (CI: a 3 s soak, 12 s under -race, and 20000 generator calls; here SOAK and OPS)
SOAK ?= 60s
OPS ?= 200000
chaos-soak:
	scripts/ensure-redis.sh
	go test -race -count=1 -timeout 0 -run 'TestChaos/(18|20|27)' -v ./internal/engine -args -chaos.soak=$(SOAK) -chaos.ops=$(OPS)

## bench: benchmarks on real redis-server processes (compare runs with benchstat)
bench:
	scripts/ensure-redis.sh
	go test -run '^$$' -bench . -benchmem -count 6 ./internal/engine

## bench-peers: redlock beside redsync, a bare majority lock and bsm/redislock, in one process (a nested module; BenchmarkContendedProcesses runs its lockers in processes of their own)
bench-peers:
	scripts/ensure-redis.sh
	cd bench/peers && go test -run '^$$' -bench . -benchmem -count 6 .

## perf: the performance goals' table (docs/performance.md): three runs of the benchmarks each row reads, ratios within each run, medians (RUNS=n for another count)
perf:
	scripts/ensure-redis.sh
	scripts/perf.sh

demo:
	go run ./cmd/redlock-demo

## compose-smoke: docker-compose.yml with a locally built image, the demo against it (skips without Docker)
compose-smoke:
	scripts/compose-smoke.sh
