#!/usr/bin/env bash
# Opt-in: runs the C interface test programs under AddressSanitizer and
# LeakSanitizer. Needs gcc or clang with libasan.
#   scripts/c-sanitize.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --lib --quiet
lib="${CARGO_TARGET_DIR:-target}/debug/libfutoin_asyncsteps.a"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for src in tests/c/*.c; do
    name=$(basename "$src" .c)
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror -g -fsanitize=address -fno-omit-frame-pointer \
        -Iinclude "$src" "$lib" -lpthread -ldl -lm -o "$out/$name"
    echo "== $name (ASan + LSan)"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 "$out/$name" | tail -1
done
