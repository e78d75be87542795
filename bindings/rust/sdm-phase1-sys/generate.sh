#!/usr/bin/env bash
# Regenerates src/bindings.rs from include/sdm/phase1.h with the bindgen CLI (Debian's
# `bindgen` package) and formats it with rustfmt, as `cargo fmt` would.
#   generate.sh            writes src/bindings.rs
#   generate.sh OUTPUT     writes OUTPUT instead (the freshness test compares the two)
# -fparse-all-comments turns the header's plain comments into rustdoc on the raw items.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
include="$here/../../../include"
header="$include/sdm/phase1.h"
out="${1:-$here/src/bindings.rs}"

bindgen "$header" \
    --allowlist-function 'sdm_p1_.*' \
    --allowlist-type 'sdm_p1_.*' \
    --allowlist-var 'SDM_P1_.*' \
    --no-prepend-enum-name \
    --size_t-is-usize \
    --no-rustfmt-bindings \
    -- -fparse-all-comments -I"$include" >"$out.tmp"
rustfmt --edition 2021 --emit stdout <"$out.tmp" >"$out"
rm -f "$out.tmp"
