#!/usr/bin/env bash
# The whole GPU suite in one command, on a bare GPU machine without network access. From the
# repository root:
#
#   tests/cuda/gpu_suite.sh [--only-build] [--no-test] [--no-sanitizer] [--no-python] [--no-bench]
#                      [--no-overhead] [--build-dir DIR] [--arch LIST] [--log-dir DIR]
#
# Steps: configure (meson, CUDA enabled, kernels for sm_90 unless --arch), compile, meson test
# (every C/C++ test, tests/cuda/test_cuda, test_arith_device, test_stage_dump_cuda included),
# test_cuda --quick under compute-sanitizer's memcheck (racecheck, initcheck and synccheck: a
# few cases of its "cover" and "two_blocks" families), the Python tests
# against the CUDA build, the CUDA benchmark (phase1_bench --backend cuda --json) and the host
# time of a cached PyTorch call (bench_overhead.py, fast path and Python path).
# The terminal gets one line per step (PASS / FAIL / SKIP, counts, seconds) and a summary
# with the GPU and driver; each step's full log goes to the log dir: --log-dir, else $OUT,
# else /tmp/gpu_suite. Where $OUT is set the step logs are bundled into logs.tar.gz (failed
# steps' logs also stay beside it), so the folder holds a few files. Exit status 0 when no
# step failed.
# shellcheck disable=SC2317  # the step and summary functions are called through run_step
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

build="build-gpu"
arch=90
log="${OUT:-/tmp/gpu_suite}"
do_test=1 do_sanitizer=1 do_python=1 do_bench=1 do_overhead=1

while [ $# -gt 0 ]; do
    case "$1" in
        --only-build) do_test=0 do_sanitizer=0 do_python=0 do_bench=0 do_overhead=0 ;;
        --no-test) do_test=0 ;;
        --no-sanitizer) do_sanitizer=0 ;;
        --no-python) do_python=0 ;;
        --no-bench) do_bench=0 ;;
        --no-overhead) do_overhead=0 ;;
        --build-dir) build="$2"; shift ;;
        --arch) arch="$2"; shift ;;
        --log-dir) log="$2"; shift ;;
        -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "gpu_suite.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

steps="$log/steps"
mkdir -p "$steps"
rm -f "$steps"/*.log
summary="$log/summary.txt"
: >"$summary"
failed=0
step_no=0
results=()

say() { printf '%s\n' "$*" | tee -a "$summary"; }

# ---- tools -----------------------------------------------------------------------------------

# The CUDA toolkit's programs where they are not on PATH already.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi
# meson and ninja may exist only as Python packages.
if command -v meson >/dev/null 2>&1; then
    meson=(meson)
else
    meson=(python3 -m mesonbuild.mesonmain)
fi
if ! command -v ninja >/dev/null 2>&1; then
    ninja_bin=$(python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))' 2>/dev/null || true)
    [ -n "$ninja_bin" ] && export NINJA="$ninja_bin"
fi
sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && sanitizer=/usr/local/cuda/bin/compute-sanitizer


# ---- running a step ----------------------------------------------------------------------------

# run_step NAME SUMMARIZER COMMAND...: runs COMMAND with its output in the step's log;
# SUMMARIZER LOG RC prints the step's counts. Exit 77 is a skip.
run_step() {
    local name=$1 summarize=$2
    shift 2
    step_no=$((step_no + 1))
    local file
    file="$steps/$(printf '%02d' "$step_no")-$name.log"
    local t0 rc=0 status detail secs
    t0=$(date +%s.%N)
    "$@" >"$file" 2>&1 || rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    detail=$("$summarize" "$file" "$rc" 2>/dev/null || true)
    case $rc in
        0) status=PASS ;;
        77) status=SKIP ;;
        *)
            status=FAIL
            failed=1
            detail="$detail (exit $rc; last line: $(tail -n 1 "$file" | cut -c1-160))"
            ;;
    esac
    local line
    line=$(printf '%-20s %-4s %7ss  %s' "$name" "$status" "$secs" "$detail")
    results+=("$line")
    say "$line"
    return 0
}

skip_step() {   # NAME REASON
    local line
    line=$(printf '%-20s %-4s %7s   %s' "$1" SKIP - "$2")
    results+=("$line")
    say "$line"
}

step_passed() { [[ "${results[-1]}" == *" PASS "* ]]; }

# ---- summarizers: a step's counts from its log -------------------------------------------------

sum_setup() { grep -E 'CUDA backend|CUDA architectures' "$1" | sed 's/^ *//; s/  *:/:/' | paste -sd ';' - | sed 's/;/; /g'; }
sum_compile() {
    echo "$(grep -c 'Linking target' "$1") targets linked, $(grep -ci 'warning' "$1") warning lines"
}
sum_meson_test() {
    local counts cuda
    counts=$(grep -E '^(Ok|Fail|Unexpected Pass|Skipped|Timeout): ' "$1" |
        awk -F: '{ gsub(/ /, "", $2); printf "%s%s %s", sep, $1, $2; sep = ", " }')
    cuda=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$build/meson-logs/testlog.txt" 2>/dev/null | tail -1)
    echo "$counts${cuda:+; test_cuda: $cuda}"
}
sum_sanitizer() {
    local errors cases
    errors=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$1" | sed 's/^=* *//' | paste -sd ';' - | sed 's/;/; /g')
    cases=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -1)
    echo "${errors:-no error summary}${cases:+; test_cuda --quick: $cases}"
}
sum_pytest() { grep -E '(passed|failed|error|skipped|no tests ran)' "$1" | tail -1; }
sum_bench() {
    local copy rows
    copy=$(grep -oE '[0-9.]+ GB/s \(read \+ write\)' "$1" | head -1)
    rows=$(grep -cE '^(S[1-7]|W[RA][0-9]+) ' "$1")
    echo "copy ${copy:-?}; $rows shape rows; S1 default: $(awk '$1 == "S1" && $2 == "default" { print $12 " ms, " $17 " of copy" }' "$1")"
}

# ---- the steps -----------------------------------------------------------------------------------

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
say "gpu_suite: $root, build dir $build, kernels for gpu_arch=$arch, logs in $log"

configure() {
    local opts=(-Dcuda=enabled "-Dgpu_arch=$arch" --buildtype=release)
    if [ -f "$build/build.ninja" ]; then
        "${meson[@]}" setup --reconfigure "$build" "${opts[@]}" || "${meson[@]}" setup --wipe "$build" "${opts[@]}"
    else
        "${meson[@]}" setup "$build" "${opts[@]}"
    fi
}
run_step configure sum_setup configure
if step_passed; then
    run_step compile sum_compile "${meson[@]}" compile -C "$build"
else
    skip_step compile "configure failed"
fi
built=0
step_passed && built=1

if [ "$do_test" = 1 ]; then
    if [ "$built" = 1 ]; then
        # meson's own summary lines and the full logs of failing tests; testlog.txt has all
        run_step meson-test sum_meson_test "${meson[@]}" test -C "$build" --print-errorlogs
        cp "$build/meson-logs/testlog.txt" "$steps/meson-testlog.txt" 2>/dev/null || true
    else
        skip_step meson-test "not built"
    fi
fi

if [ "$do_sanitizer" = 1 ]; then
    for tool in memcheck racecheck initcheck synccheck; do
        if [ "$built" = 0 ] || [ ! -x "$build/tests/cuda/test_cuda" ]; then
            skip_step "sanitizer-$tool" "test_cuda not built"
        elif [ -z "$sanitizer" ]; then
            skip_step "sanitizer-$tool" "compute-sanitizer not found"
        else
            # memcheck takes the quick set (about 130 s on an H200); racecheck, which follows
            # every shared-memory access, would take over 8 minutes on it (and 45 s on the
            # quick "cover" family were not enough): the others take the first three cases
            # of that family (every stage, small chunks, the full-size kernel) and, as a
            # second step, the quick "two_blocks" family (the half-size kernel, both log
            # forms, hot slots, the one-batch pair sums falling back: 12 s under racecheck).
            if [ "$tool" = memcheck ]; then
                run_step "sanitizer-$tool" sum_sanitizer \
                    "$sanitizer" --tool "$tool" --leak-check full --error-exitcode 1 \
                    "$build/tests/cuda/test_cuda" --quick
            else
                run_step "sanitizer-$tool" sum_sanitizer \
                    "$sanitizer" --tool "$tool" --error-exitcode 1 \
                    "$build/tests/cuda/test_cuda" --quick --only cover --limit 3
                run_step "sanitizer-$tool-two_blocks" sum_sanitizer \
                    "$sanitizer" --tool "$tool" --error-exitcode 1 \
                    "$build/tests/cuda/test_cuda" --quick --only two_blocks
                # The backward: six cases of "cover" (each way it is run: payload given and
                # sorted again, upstream subsets, non-finite upstream, gradient subsets).
                run_step "sanitizer-$tool-backward" sum_sanitizer \
                    "$sanitizer" --tool "$tool" --error-exitcode 1 \
                    "$build/tests/cuda/test_cuda" --quick --only bwd_cover --limit 6
            fi
        fi
    done
fi

# The Python tests against the CUDA build; cffi and pycparser may come as wheels in .whl/.
python_tests() {
    local site=/tmp/gpu_suite_site
    if compgen -G ".whl/*.whl" >/dev/null; then
        python3 -m pip install -q --no-index --no-deps --upgrade --target "$site" .whl/*.whl
        export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    if ! python3 -c 'import cffi, numpy, pytest' 2>/dev/null; then
        echo "python3 lacks cffi, numpy or pytest: skipped"
        return 77
    fi
    SDMP1_LIBRARY="$(cd "$build" && pwd)/libsdmp1.so" python3 -m pytest -q -p no:cacheprovider bindings/python/tests
}
if [ "$do_python" = 1 ]; then
    if ! compgen -G "bindings/python/tests/test_*.py" >/dev/null; then
        skip_step python "no tests in bindings/python/tests"
    elif [ "$built" = 0 ]; then
        skip_step python "not built"
    else
        run_step python sum_pytest python_tests
    fi
fi

if [ "$do_bench" = 1 ]; then
    if [ "$built" = 1 ]; then
        run_step bench sum_bench "$build/bench/phase1_bench" --backend cuda --json "$log/bench.json"
    else
        skip_step bench "not built"
    fi
fi

# The host time of a cached PyTorch call (bindings/python/benchmarks/bench_overhead.py, issue
# 44's 20 us at S6), through the compiled fast path sdm_phase1._torch_fast where the build has
# it, then through the Python path alone.
overhead() {
    if ! python3 -c 'import cffi, torch' 2>/dev/null; then
        echo "python3 lacks cffi or torch: skipped"
        return 77
    fi
    local lib
    lib="$(cd "$build" && pwd)/libsdmp1.so"
    echo "== the compiled fast path"
    SDMP1_LIBRARY="$lib" python3 bindings/python/benchmarks/bench_overhead.py \
        --out "$log/overhead_fast.txt" || return
    echo "== the Python path (SDMP1_TORCH_FAST=0)"
    SDMP1_LIBRARY="$lib" SDMP1_TORCH_FAST=0 python3 bindings/python/benchmarks/bench_overhead.py \
        --out "$log/overhead_python.txt"
}
sum_overhead() { grep -cE 'us' "$1" | sed 's/$/ timed lines/'; }
if [ "$do_overhead" = 1 ]; then
    if [ "$built" = 1 ]; then
        run_step overhead sum_overhead overhead
    else
        skip_step overhead "not built"
    fi
fi

# ---- summary ---------------------------------------------------------------------------------

say ""
say "GPU: ${gpu:-nvidia-smi gave nothing}"
say "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
say "compute-sanitizer: ${sanitizer:-not found}"
bench_log=$(compgen -G "$steps/*-bench.log" | head -1 || true)
if [ -n "$bench_log" ]; then
    say ""
    grep -vE '^phase1_bench' "$bench_log" | tee -a "$summary" || true
fi
npass=0 nfail=0 nskip=0
for r in "${results[@]}"; do
    case "$r" in
        *" PASS "*) npass=$((npass + 1)) ;;
        *" FAIL "*) nfail=$((nfail + 1)) ;;
        *) nskip=$((nskip + 1)) ;;
    esac
done
say ""
say "gpu_suite: $npass steps passed, $nfail failed, $nskip skipped; logs in $log"

# Under a runner that returns few files ($OUT), one archive holds every step's log.
if [ -n "${OUT:-}" ] && [ "$log" = "$OUT" ]; then
    for r in "${results[@]}"; do
        if [[ "$r" == *" FAIL "* ]]; then
            name=${r%% *}
            cp "$steps"/*-"$name".log "$log/FAILED-$name.log" 2>/dev/null || true
        fi
    done
    tar -czf "$log/logs.tar.gz" -C "$log" steps && rm -rf "$steps"
fi
exit "$failed"
