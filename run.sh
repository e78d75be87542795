#!/usr/bin/env bash
# libsdmp1's one entry point for a fresh machine:
#   ./run.sh main    install what is missing, build, run the examples on the CPU backend (C,
#                    NumPy, sequences of different lengths, the SDM layer, Rust)
#   ./run.sh test    install what is missing, build, run every test (C/C++ and the documentation
#                    checks, Python against the installed wheel, Rust), lint, and the examples
#   ./run.sh build   install what is missing and build only
#   ./run.sh abi-baseline   build, then write abi/libsdmp1.abi from the library (after a
#                    reviewed ABI change; see abi/libsdmp1.abignore)
# The build goes to ./build (Meson + Ninja). Set SDMP1_BUILD_DIR to use another folder.
# SDMP1_SANITIZE=0 skips the sanitizer builds of `test` (ASan + UBSan, TSan, fuzzing);
# SDMP1_FUZZ_SECONDS sets how long it fuzzes (default 120).
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
# its libFuzzer runtime (fuzzing), abigail-tools (the ABI check).
install_test_tools() {
    local missing=()
    command -v clang++ >/dev/null 2>&1 || missing+=(clang)
    if ! command -v clang++ >/dev/null 2>&1 ||
        [ ! -f "$(clang++ -print-file-name="libclang_rt.fuzzer-$(uname -m).a")" ]; then
        missing+=(libclang-rt-dev)
    fi
    command -v abidiff >/dev/null 2>&1 || missing+=(abigail-tools)
    [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
}

# A Python that pip may install into: the given one, or a virtual environment in ./.venv
# where the given one is managed by the system (PEP 668) or has no pip.
choose_python() {
    local managed
    managed=$("$python" -c 'import os, sysconfig; print(os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))')
    if [ "$managed" = False ] && "$python" -m pip --version >/dev/null 2>&1; then
        return 0
    fi
    if [ ! -x "$root/.venv/bin/python" ]; then
        step "creating the virtual environment $root/.venv"
        "$python" -m venv "$root/.venv"
    fi
    python="$root/.venv/bin/python"
}

# Python packages for the build (meson), the binding (numpy, cffi) and the tests.
install_python_packages() {
    choose_python
    local missing=()
    "$python" -c 'import mesonbuild' 2>/dev/null || missing+=("meson>=1.1")
    "$python" -c 'import numpy' 2>/dev/null || missing+=(numpy)
    "$python" -c 'import cffi' 2>/dev/null || missing+=(cffi)
    "$python" -c 'import pycparser' 2>/dev/null || missing+=(pycparser)
    "$python" -c 'import pytest' 2>/dev/null || missing+=(pytest)
    "$python" -c 'import ml_dtypes' 2>/dev/null || missing+=(ml_dtypes)   # the bfloat16 dtype test
    "$python" -m ruff --version >/dev/null 2>&1 || missing+=(ruff)
    [ ${#missing[@]} -eq 0 ] && return 0
    step "installing Python packages: ${missing[*]}"
    "$python" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
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

main_job() {
    build
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
# of the header, so the bindgen CLI is installed where missing), clippy and rustfmt.
rust_tests() {
    command -v bindgen >/dev/null 2>&1 || apt_install bindgen
    step "Rust tests (cargo test), clippy and rustfmt in bindings/rust"
    rust_cargo test --offline
    rust_cargo clippy --offline --all-targets -- -D warnings
    rust_cargo fmt --check
    rust_static_tests
}

# The `static` feature from a crate outside the workspace, as a user's: its program links
# libsdmp1.a and runs with no library path set.
rust_static_tests() {
    step "Rust: a program linked with libsdmp1.a (bindings/rust/tests/static-link)"
    (cd "$root/bindings/rust/tests/static-link" &&
        SDMP1_LIB_DIR="$build" cargo test --offline -- --nocapture &&
        SDMP1_LIB_DIR="$build" cargo clippy --offline --all-targets -- -D warnings &&
        cargo fmt --check)
}

test_job() {
    build
    install_test_tools
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
    "$python" -m ruff check --quiet "$root/bindings/python" "$root/examples" "$root/tests"
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
    abi_check
    step "C/C++ tests (meson test)"
    meson_cmd test -C "$build" --print-errorlogs
    wheel_tests
    rust_tests
    run_examples
    if [ "${SDMP1_SANITIZE:-1}" != 0 ]; then
        sanitized_tests
        thread_sanitized_tests
        fuzz_tests
    fi
}

# The wheel as a user gets it: `pip wheel .` (meson-python builds libsdmp1 into the package,
# its CUDA kernels for SDMP1_GPU_ARCH only, default sm_90, which keeps CI short), installed
# into a fresh virtual environment with the tests' packages, then the Python tests against
# that installed copy (SDMP1_TEST_INSTALLED=1: not the source tree's).
wheel_tests() {
    local wheel="$build-wheel" t0=$SECONDS
    step "Python wheel: pip wheel . (gpu_arch ${SDMP1_GPU_ARCH:-90}), installed into a fresh virtual environment"
    rm -rf "$wheel/dist" "$wheel/venv"
    "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$wheel/dist" "$root" \
        -Csetup-args=-Dgpu_arch="${SDMP1_GPU_ARCH:-90}" -Cbuild-dir="$wheel/meson"
    local file
    file=$(ls "$wheel"/dist/*.whl)
    echo "wheel: $(basename "$file"), $(du -k "$file" | cut -f1) KiB, built in $((SECONDS - t0)) s"
    "$python" -m venv "$wheel/venv"
    "$wheel/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$file" pytest \
        pycparser ml_dtypes
    echo "wheel: built and installed in $((SECONDS - t0)) s"
    step "Python tests (pytest) against the installed wheel"
    # From inside the environment's folder, so that nothing of the checkout is on the path.
    (cd "$wheel/venv" && SDMP1_TEST_INSTALLED=1 SDMP1_BUILD_DIR="$build" \
        "$wheel/venv/bin/python" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests")
    echo "wheel: built, installed and tested in $((SECONDS - t0)) s"
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
    meson_cmd compile -C "$tsan" tests/test_threads tests/test_cpu
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$tsan/tests/test_threads"
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$tsan/tests/test_cpu"
}

# The libFuzzer harness tests/fuzz/fuzz_api.cpp for a bounded time, from the committed seed
# corpus, under ASan + UBSan (clang, host code). A crash, a sanitizer report, a broken promise
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
    grep -E 'stat::number_of_executed_units' "$work/log"
    rm -rf "$work"
}

# The same tests against a build with AddressSanitizer and UndefinedBehaviorSanitizer: no
# out-of-bounds access, leak or undefined behaviour on any path the tests take.
sanitized_tests() {
    local san="$build-sanitize"
    step "C/C++ and Python tests under ASan + UBSan (SDMP1_SANITIZE=0 skips)"
    if [ ! -f "$san/build.ninja" ]; then
        # Host code only: the sanitizers instrument what the compiler builds, not the CUDA
        # runtime linked into the library, and CI has no GPU for the kernels.
        meson_cmd setup "$san" "$root" --buildtype=debugoptimized -Dcuda=disabled \
            -Db_sanitize=address,undefined -Db_lundef=false
    fi
    meson_cmd compile -C "$san"
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 meson_cmd test -C "$san" --print-errorlogs
    # Python itself is not instrumented: preload the runtimes, and leave leak checks to the
    # C tests above (the interpreter keeps memory until exit).
    LD_PRELOAD="$(cc -print-file-name=libasan.so):$(cc -print-file-name=libubsan.so)" \
        ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        SDMP1_LIBRARY="$san/libsdmp1.so" "$python" -m pytest -q -p no:cacheprovider \
        "$root/bindings/python/tests"
}

case "${1:-}" in
    main) main_job ;;
    test) test_job ;;
    build) build ;;
    abi-baseline) abi_baseline_job ;;
    *)
        echo "usage: $0 main|test|build|abi-baseline" >&2
        exit 2
        ;;
esac
