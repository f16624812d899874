#!/usr/bin/env bash
# The performance goals' figures (docs/performance.md): RUNS runs (default
# 3) of the benchmarks each row reads, each run's output in OUT (default a
# temporary directory), then the table of every row's figure per run, as
# ratios within that run, and their median (internal/perfreport).
# Needs redis-server (scripts/ensure-redis.sh). Takes about 3 minutes a run
# on two cores; run nothing else heavy meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export GOWORK=off
for i in $(seq 1 "$runs"); do
	f="$out/run$i.txt"
	: >"$f"
	(
		cd bench/peers
		go test -run '^$' -benchmem -count 1 \
			-bench '^Benchmark(Parallel|Uncontended)$/^(bsm-1-node|floor|floor-scripts|redsync|redlock)$' .
		go test -run '^$' -count 1 -benchtime 3000x \
			-bench '^BenchmarkContendedProcesses$/^(bsm-1-node|redsync|redlock|oracle-pubsub|oracle-pubsub-line)$' .
		go test -run '^$' -count 1 -benchtime 100000x -bench '^BenchmarkServerCPU$' .
	) | tee -a "$f"
	go test -run '^$' -count 1 -benchtime 3000x -bench '^BenchmarkTails$' ./internal/engine | tee -a "$f"
done
echo
echo "runs in $out"
go run ./internal/perfreport "$out"/run*.txt
