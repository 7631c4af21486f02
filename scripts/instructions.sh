#!/usr/bin/env bash
# Instructions per operation of the engine's cases (examples/instructions.rs),
# counted by callgrind: the difference between 4 and 2 batches of 20,000
# operations on one warm loop, default release build. Deterministic for a
# given binary; it moves by 1-3% with how the crate's functions fall into
# codegen units.
#
#   scripts/instructions.sh [case ...]   (default: every engine case)
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

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(simple external repeat-add error await external-thread future-wake timer timer-timeout
    sync-grant io)
cargo build --release --quiet --example instructions
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/instructions"

count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
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
    echo "$c: $(( (four - two) / 40000 )) instructions per operation"
done
