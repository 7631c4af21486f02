#!/usr/bin/env bash
# Opt-in: runs the tests that exercise unsafe code under valgrind memcheck
# and fails on any memory error or definite leak.
#
#   scripts/valgrind.sh            (honours CARGO_TARGET_DIR, CC)
#
# What runs, one valgrind process each, tests one at a time
# (--test-threads=1):
#   - the library's unit tests (args, state, errors, the sync gate, the
#     timer wheel);
#   - tests/cabi/wrap.rs (the tests wrap:: of the binary cabi: the C ABI
#     and cabi::wrap, most of the unsafe code), tests/memory.rs (a
#     counting global allocator),
#     tests/errors/ and tests/panics/in_user_code.rs (the tests
#     in_user_code:: of the binary panics: panics unwinding through the
#     engine, flows torn down after a panicking Drop);
#   - the C programs of tests/cabi/programs.rs (tests/c/*.c), compiled
#     here the way tests/cabi/programs.rs compiles them and run directly
#     under valgrind (not through the Rust test binary, which only spawns
#     them).
# Each gets one summary line: tests passed/failed, memcheck errors, bytes
# definitely lost. The exit status is non-zero when any binary has an
# error, a definite leak, a failed test, or does not build.
#
# Leaks: only "definitely lost" fails the run (and is detailed in the
# logs). "Still reachable" (thread locals, std's lazily built globals) and
# "possibly lost" (interior pointers into live blocks) only appear in the
# logs' leak summaries.
#
# Needs: valgrind (3.15+), jq, a C compiler, cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in valgrind jq; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "valgrind.sh: $tool is not installed" >&2
        exit 2
    fi
done

target="${CARGO_TARGET_DIR:-$PWD/target}"
logs="$target/valgrind"
mkdir -p "$logs"
# An exit code no test binary uses (libtest fails with 101).
VG_ERR=97
VG=(valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite
    --errors-for-leak-kinds=definite --error-exitcode=$VG_ERR
    --num-callers=40 --fair-sched=yes)

# Tests that cannot run under valgrind, with the reason. Format: one
# "<run> <test name> <reason>" per line, <run> as in the list of runs
# below ("lib" for the unit tests, "cabi:wrap::" for tests/cabi/wrap.rs).
# Valgrind runs code 20-50x slower and serialises threads, so only tests
# whose assertions are about real (wall-clock) time belong here; every
# other test must pass. None of the binaries run here needs one today
# (their timing-dependent tests use TestTool's virtual time or only wait
# for timers to fire, however late).
SKIPS=$(cat <<'EOF'
EOF
)

echo "== building test binaries (cargo test --no-run)"
json=$(mktemp)
trap 'rm -f "$json"' EXIT
if ! cargo test --no-run --quiet --message-format=json \
    --lib --test cabi --test memory --test errors --test panics >"$json"; then
    jq -r 'select(.reason == "compiler-message") | .message.rendered' "$json" >&2
    echo "valgrind.sh: the test binaries do not build" >&2
    exit 1
fi

# The test executable of a target: kind "lib" (the unit tests) or "test"
# (tests/<name>.rs or tests/<name>/main.rs).
exe_of() {
    jq -r --arg n "$1" --arg k "$2" '
        select(.reason == "compiler-artifact" and .executable != null
               and .profile.test and .target.name == $n
               and ((.target.kind | index("test")) != null) == ($k == "test"))
        | .executable' "$json" | tail -1
}

echo "== building the static library and the C programs"
# The same separate target dir as tests/cabi/programs.rs: a plain --lib build
# resolves features without the dev-dependencies, so it must not share
# the deps folder of the test build.
cargo build --lib --quiet --target-dir "$target/cabi-build"
lib="$target/cabi-build/debug/libfutoin_asyncsteps.a"
cbin="$target/valgrind/c"
mkdir -p "$cbin"
c_programs=()
for src in tests/c/*.c; do
    name=$(basename "$src" .c)
    ${CC:-cc} -std=c11 -Wall -Wextra -Werror -g -Iinclude "$src" "$lib" \
        -lpthread -ldl -lm -o "$cbin/$name"
    c_programs+=("$name")
done

status=0
summary=()

# Reads a valgrind log: "<errors> <bytes definitely lost> <blocks>".
vg_counts() {
    local log=$1 errors lost blocks
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9,]*\) errors.*/\1/p' "$log" | tail -1 | tr -d ,)
    lost=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes in \([0-9,]*\) blocks.*/\1 \2/p' "$log" \
        | tail -1 | tr -d ,)
    echo "${errors:-?} ${lost:-0 0}"
}

# run_one <label> <log> <kind: rust|c> <command...>
run_one() {
    local label=$1 log=$2 kind=$3
    shift 3
    echo "== $label (log: $log)"
    local out rc=0
    out=$("${VG[@]}" --log-file="$log" "$@" 2>&1) || rc=$?
    local tests
    if [ "$kind" = rust ]; then
        tests=$(printf '%s\n' "$out" | sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed; \([0-9]*\) ignored.*/\1 passed, \2 failed, \3 ignored/p' | tail -1)
    else
        tests="$(printf '%s\n' "$out" | grep -c '^ok ' || true) ok, $(printf '%s\n' "$out" | tail -1)"
    fi
    printf '%s\n' "$out" | grep -E '^(test .* (FAILED|ignored)|FAIL|not ok)' || true
    local counts errors lost blocks verdict
    counts=$(vg_counts "$log")
    read -r errors lost blocks <<<"$counts"
    if [ "$rc" -eq 0 ] && [ "$errors" = 0 ] && [ "$lost" = 0 ]; then
        verdict=ok
    else
        verdict=FAIL
        status=1
        if [ "$rc" -eq "$VG_ERR" ]; then
            verdict="FAIL (memcheck)"
        elif [ "$rc" -ne 0 ]; then
            verdict="FAIL (exit $rc)"
            printf '%s\n' "$out" | tail -30
        fi
    fi
    summary+=("$(printf '%-26s %-16s tests: %-36s errors: %-4s definitely lost: %s bytes in %s blocks' \
        "$label" "$verdict" "${tests:-?}" "$errors" "$lost" "$blocks")")
}

# The runs: "lib" (the unit tests), a test binary, or "<binary>:<filter>",
# the tests of that binary whose names contain the filter ("cabi:wrap::"
# is the module wrap of tests/cabi/, not the C programs or the fuzzing).
for run in lib cabi:wrap:: memory errors panics:in_user_code::; do
    t=${run%%:*}
    filter=${run#"$t"}
    filter=${filter#:}
    label=$t${filter:+-${filter%::}}
    if [ "$t" = lib ]; then
        exe=$(exe_of futoin_asyncsteps lib)
    else
        exe=$(exe_of "$t" test)
    fi
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        echo "valgrind.sh: no test executable for $t" >&2
        summary+=("$(printf '%-26s %s' "$label" "FAIL (not built)")")
        status=1
        continue
    fi
    skip_args=()
    while read -r bin name reason; do
        [ "$bin" = "$run" ] || continue
        echo "   skipped: $t::$name ($reason)"
        skip_args+=(--skip "$name")
    done <<<"$SKIPS"
    run_one "$label" "$logs/$label.log" rust "$exe" --test-threads=1 ${filter:+"$filter"} \
        ${skip_args[@]+"${skip_args[@]}"}
done

for name in "${c_programs[@]}"; do
    run_one "c:$name" "$logs/c-$name.log" c "$cbin/$name"
done

echo
echo "== valgrind summary"
printf '%s\n' "${summary[@]}"
if [ "$status" -ne 0 ]; then
    echo "valgrind.sh: FAILED (see the logs in $logs)"
else
    echo "valgrind.sh: all clean"
fi
exit "$status"
