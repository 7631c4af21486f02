#!/usr/bin/env bash
# Instructions per operation of the engine's cases (examples/instructions.rs),
# counted by callgrind: the difference between 4 and 2 batches of 20,000
# operations on one warm loop, default release build. Deterministic for a
# given binary; it moves by 1-3% with how the crate's functions fall into
# codegen units.
#
#   scripts/instructions.sh [case ...]   (default: every case)
#
# Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null 2>&1 || { echo "instructions.sh: valgrind is not installed" >&2; exit 2; }

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(simple external repeat-add error await)
cargo build --release --quiet --example instructions
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/instructions"

count() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 |
        sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

for c in "${cases[@]}"; do
    two=$(count "$c" 2)
    four=$(count "$c" 4)
    echo "$c: $(( (four - two) / 40000 )) instructions per operation"
done
