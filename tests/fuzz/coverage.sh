#!/usr/bin/env bash
# Line coverage of src/ by fuzz inputs: builds fuzz_api with clang's source-based coverage
# (no sanitizers) in ${SDMP1_COVERAGE_BUILD:-build-fuzz-coverage}, runs every input of the
# given folders or files once, and prints llvm-cov's report of src/ (the host code; src/cuda
# is not built). Needs clang and llvm (llvm-profdata, llvm-cov).
#   tests/fuzz/coverage.sh tests/fuzz/corpus [MORE_INPUTS...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${SDMP1_COVERAGE_BUILD:-$root/build-fuzz-coverage}"
python="${PYTHON:-python3}"
[ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
flags='-fprofile-instr-generate -fcoverage-mapping'

if [ ! -f "$build/build.ninja" ]; then
    CC=clang CXX=clang++ "$python" -m mesonbuild.mesonmain setup "$build" "$root" --buildtype=debug \
        -Dcuda=disabled -Dfuzzing=true -Db_lundef=false -Dc_args="$flags" -Dcpp_args="$flags" \
        -Dc_link_args="$flags" -Dcpp_link_args="$flags"
fi
"$python" -m mesonbuild.mesonmain compile -C "$build" tests/fuzz/fuzz_api
rm -f "$build"/fuzz-*.profraw
LLVM_PROFILE_FILE="$build/fuzz-%p.profraw" "$build/tests/fuzz/fuzz_api" -runs=0 "$@" 2>&1 | grep -E 'DONE|Done'
llvm-profdata merge -sparse "$build"/fuzz-*.profraw -o "$build/fuzz.profdata"
llvm-cov report "$build/libsdmp1.so" -instr-profile="$build/fuzz.profdata" "$root/src"
