#!/usr/bin/env bash
# A short fuzzing pass over the token decoder, the strict body scanner, answer validation and the
# layer's message face (fuzz/README.md). With a nightly toolchain (`rustup toolchain list`) it runs the cargo-fuzz
# targets under libFuzzer, installing cargo-fuzz from crates.io if it is missing; without one it runs
# the stable proptest fallback (tests/fuzz_fallback.rs) for about as long. Exits non-zero on any
# finding and prints where the crashing input is.
#
# Environment:
#   FUZZ_SECONDS    seconds per target (default 30)
#   FUZZ_TARGETS    targets to run (default: token_decode scan_body read_answer layer_forward)
#   FUZZ_JOBS       targets fuzzed at once, one core each (default: the number of cores)
#   FUZZ_MODE       auto (default), libfuzzer or proptest
#   FUZZ_SANITIZER  cargo-fuzz sanitizer (default none: the crate has no unsafe code, and panics
#                   are the findings; `address` finds memory errors in dependencies, ~5x slower)
#   FUZZ_CORPUS     keep the grown corpus here (default: a temporary copy of fuzz/seeds, removed)
#   FUZZ_TARGET_DIR cargo target directory for the fuzz build (default fuzz/target); one that
#                   outlives the clone (CI: under $HOME/.cache) turns the ~1.5 min cold build of the
#                   instrumented dependencies into a rebuild of this crate alone
set -euo pipefail
cd "$(dirname "$0")/.."
script_start=$(date +%s)

seconds=${FUZZ_SECONDS:-30}
read -r -a targets <<<"${FUZZ_TARGETS:-token_decode scan_body read_answer layer_forward}"
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
mode=${FUZZ_MODE:-auto}
sanitizer=${FUZZ_SANITIZER:-none}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

elapsed() { echo $(($(date +%s) - $1)); }

if [[ $mode == auto ]]; then
    mode=proptest
    if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
        if cargo +nightly fuzz --version >/dev/null 2>&1; then
            mode=libfuzzer
        else
            echo "fuzz: nightly found, cargo-fuzz missing: cargo install cargo-fuzz --locked"
            t0=$(date +%s)
            if cargo install cargo-fuzz --locked >"$work/install.log" 2>&1; then
                echo "fuzz: cargo-fuzz installed in $(elapsed "$t0") s"
                mode=libfuzzer
            else
                tail -n 20 "$work/install.log"
                echo "fuzz: cargo-fuzz could not be installed; using the stable fallback"
            fi
        fi
    else
        echo "fuzz: no nightly toolchain; using the stable fallback"
    fi
fi

failed=0

if [[ $mode == libfuzzer ]]; then
    echo "fuzz: mode libfuzzer ($(cargo +nightly fuzz --version)), $seconds s per target," \
        "$jobs at once, sanitizer $sanitizer"
    flags=(--release --debug-assertions --sanitizer "$sanitizer")
    if [[ -n ${FUZZ_TARGET_DIR:-} ]]; then
        mkdir -p "$FUZZ_TARGET_DIR"
        flags+=(--target-dir "$FUZZ_TARGET_DIR")
    fi
    t0=$(date +%s)
    cargo +nightly fuzz build "${flags[@]}" >"$work/build.log" 2>&1 || {
        tail -n 40 "$work/build.log"
        echo "fuzz: the fuzz targets do not build"
        exit 1
    }
    echo "fuzz: built the targets in $(elapsed "$t0") s"

    run_target() {
        local t=$1 corpus=$2 max_len dict
        case $t in
            token_decode) max_len=12000 dict=fuzz/dicts/token.dict ;; # past MAX_TOKEN_LEN (8192)
            *) max_len=4096 dict=fuzz/dicts/json.dict ;;
        esac
        mkdir -p "$corpus"
        cp fuzz/seeds/"$t"/* "$corpus"/
        local rc=0
        cargo +nightly fuzz run "${flags[@]}" "$t" "$corpus" -- \
            -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
            -max_len="$max_len" -dict="$dict" -print_final_stats=1 \
            >"$work/$t.log" 2>&1 || rc=$?
        echo "$rc" >"$work/$t.rc"
    }

    t0=$(date +%s)
    running=0
    for t in "${targets[@]}"; do
        if ((running >= jobs)); then
            wait -n || true
            running=$((running - 1))
        fi
        run_target "$t" "${FUZZ_CORPUS:-$work/corpus}/$t" &
        running=$((running + 1))
    done
    wait
    echo "fuzz: fuzzed ${#targets[@]} targets in $(elapsed "$t0") s"

    for t in "${targets[@]}"; do
        log=$work/$t.log
        rc=$(cat "$work/$t.rc" 2>/dev/null || echo "no exit code")
        # libFuzzer's last status line and its final stats.
        done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
        runs=$(grep -E '^Done [0-9]+ runs in' "$log" | tail -n 1 || true)
        execs=$(grep -E '^stat::number_of_executed_units:' "$log" | awk '{print $2}' | tail -n 1 || true)
        rate=$(grep -E '^stat::average_exec_per_sec:' "$log" | awk '{print $2}' | tail -n 1 || true)
        echo "fuzz: $t: ${execs:-?} executions (${rate:-?}/s); ${runs:-no Done line}"
        [[ -n $done_line ]] && echo "      $done_line"
        if [[ $rc != 0 ]]; then
            failed=1
            mkdir -p "fuzz/artifacts/$t"
            cp "$log" "fuzz/artifacts/$t/last-failure.log"
            echo "fuzz: $t FAILED (exit $rc). The panic, and libFuzzer's summary:"
            grep -E -A6 'panicked at' "$log" | head -n 30 || true
            grep -E '^==[0-9]+== ERROR|^SUMMARY|^MS: ' "$log" || true
            grep -E -A2 '^Output of `std::fmt::Debug`' "$log" | cut -c 1-3000 || true
            grep -E -o 'Test unit written to .*' "$log" | sed 's/^Test unit written to /fuzz: crashing input: /' || true
            echo "fuzz: full log: fuzz/artifacts/$t/last-failure.log"
        fi
    done
elif [[ $mode == proptest ]]; then
    echo "fuzz: mode proptest (stable fallback, tests/fuzz_fallback.rs), ~$seconds s per target"
    t0=$(date +%s)
    cargo test -q --all-features --test fuzz_fallback --no-run >"$work/build.log" 2>&1 || {
        tail -n 40 "$work/build.log"
        echo "fuzz: tests/fuzz_fallback.rs does not build"
        exit 1
    }
    echo "fuzz: built the fallback in $(elapsed "$t0") s"
    for t in "${targets[@]}"; do
        harnesses=$(cargo test -q --all-features --test fuzz_fallback -- --list "${t}_" 2>/dev/null |
            grep -c ': test$' || true)
        # Runs of growing size (each with fresh random seeds) until the time is spent: the first
        # is short, each next one is sized from the last one's pace to fill what is left.
        cases=200 total=0 runs=0 ok=1
        t1=$(date +%s%N)
        while :; do
            t2=$(date +%s%N)
            if ! PROPTEST_CASES=$cases cargo test -q --all-features --test fuzz_fallback -- "${t}_" \
                >"$work/$t.log" 2>&1; then
                failed=1
                echo "fuzz: $t FAILED. The minimal failing input (proptest also keeps its seed in tests/fuzz_fallback.proptest-regressions):"
                tail -n 60 "$work/$t.log"
                ok=0
                break
            fi
            total=$((total + cases)) runs=$((runs + 1))
            last_ms=$((($(date +%s%N) - t2) / 1000000 + 1))
            left_ms=$((seconds * 1000 - ($(date +%s%N) - t1) / 1000000))
            ((left_ms < 1000)) && break
            cases=$((cases * left_ms / last_ms))
            ((cases < 100)) && cases=100
        done
        if ((ok)); then
            echo "fuzz: $t: $((total * harnesses)) cases ($harnesses harnesses x $total, $runs runs)" \
                "in $((($(date +%s%N) - t1) / 1000000000)) s"
        fi
    done
else
    echo "fuzz: unknown FUZZ_MODE=$mode (auto, libfuzzer or proptest)"
    exit 2
fi

echo "fuzz: mode $mode, whole script $(elapsed "$script_start") s"
if ((failed)); then
    echo "fuzz: FINDINGS: turn each into a #[test] in tests/fuzz_fallback.rs (mod regressions)"
    exit 1
fi
echo "fuzz: no findings"
