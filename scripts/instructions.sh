#!/usr/bin/env bash
# Instructions per operation of the engine's cases (examples/instructions.rs),
# counted by callgrind: the difference between 4 and 2 batches of 20,000
# operations on one warm loop, default release build. Deterministic for a
# given binary; it moves by 1-3% with how the crate's functions fall into
# codegen units.
#
#   scripts/instructions.sh [case ...]   (default: every engine case)
#   scripts/instructions.sh --peer [case ...]
#
# With --peer, each case is counted beside its tokio peer (the example
# `instructions_tokio`, examples/common/tokio_cases.rs), and printed as
# `case: ours X, tokio Y instructions per operation, ours ÷ tokio Z` (below
# 1 means fewer than tokio); the default is every case with a peer. The
# tokio timer cases wait about 1 ms of real time an operation (tokio rounds
# a zero delay up to its next millisecond tick): 2 minutes each.
#
# A case `bench:WORKLOAD` counts a workload of the benchmark harness
# (examples/asyncsteps_bench, one loop) on both sides, ours and tokio: the
# difference between 4 and 2 batches after the warm-up, divided by the
# operations in between, and ours ÷ tokio in instructions (below 1 means
# fewer than tokio).
#
# Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null 2>&1 || { echo "instructions.sh: valgrind is not installed" >&2; exit 2; }

peer=0
if [ "${1:-}" = --peer ]; then
    peer=1
    shift
fi
cases=("$@")
if [ ${#cases[@]} -eq 0 ] && [ $peer = 1 ]; then
    cases=(simple external external-thread future-wake timer timer-timeout sync-grant io)
fi
[ ${#cases[@]} -gt 0 ] || cases=(simple external repeat-add error await external-thread future-wake timer timer-timeout
    sync-grant io)
cargo build --release --quiet --example instructions
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/instructions"
peer_bin="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/instructions_tokio"
if [ $peer = 1 ]; then
    cargo build --release --quiet --example instructions_tokio
fi

# count CASE BATCHES [BINARY]: instructions of BATCHES batches of CASE.
count() {
    local n
    n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "${3:-$bin}" "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
    [ -n "$n" ] || { echo "instructions.sh: no count for case $1 (no such case?)" >&2; return 1; }
    echo "$n"
}

harness="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/asyncsteps-bench"
for c in "${cases[@]}"; do
    [[ "$c" == bench:* ]] || continue
    cargo build --release --quiet --example asyncsteps-bench
    break
done

# Instructions and operations of N batches of one side of a harness workload.
count_bench() {
    local out ops
    out=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        "$harness" --child "$1:$2:1" --batches "$3" --no-pin 2>&1)
    ops=$(printf '%s\n' "$out" | sed -n 's/.*"ops":\([0-9]*\).*/\1/p')
    printf '%s %s\n' "$(printf '%s\n' "$out" | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')" "$ops"
}

for c in "${cases[@]}"; do
    if [[ "$c" == bench:* ]]; then
        w=${c#bench:}
        per=()
        for side in ours tokio; do
            read -r i2 o2 < <(count_bench "$w" "$side" 2)
            read -r i4 o4 < <(count_bench "$w" "$side" 4)
            per+=($(( (i4 - i2) / (o4 - o2) )))
        done
        echo "$c: ours ${per[0]}, tokio ${per[1]} instructions per operation," \
            "ours ÷ tokio $(awk -v a="${per[0]}" -v b="${per[1]}" 'BEGIN{printf "%.2f", a/b}')"
        continue
    fi
    two=$(count "$c" 2)
    four=$(count "$c" 4)
    if [ $peer = 1 ]; then
        ours=$(( (four - two) / 40000 ))
        two=$(count "$c" 2 "$peer_bin")
        four=$(count "$c" 4 "$peer_bin")
        tokio=$(( (four - two) / 40000 ))
        echo "$c: ours $ours, tokio $tokio instructions per operation," \
            "ours ÷ tokio $(awk -v a="$ours" -v b="$tokio" 'BEGIN{printf "%.2f", a/b}')"
        continue
    fi
    echo "$c: $(( (four - two) / 40000 )) instructions per operation"
done
