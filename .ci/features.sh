#!/usr/bin/env bash
# The builds users get. The crate's own dev-dependency turns every feature on for its tests, so
# `cargo test` never sees a default build; this script checks, in a copy of the package without
# that dev-dependency (and without the tests, examples and benches that need it), that the library
# builds and its unit tests pass with no features and with each feature alone, and that the docs
# build as docs.rs builds them (nightly, `--cfg docsrs`) when a nightly toolchain is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$root/target/ci-features
rm -rf "$work/pkg"
mkdir -p "$work/pkg"
cp -r src macros Cargo.toml Cargo.lock README.md "$work/pkg/"
python3 - "$work/pkg/Cargo.toml" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
# The self dev-dependency that turns every feature on, the demo's (which needs it), the benchmark
# target, and the members other than the macros.
text = re.sub(r'(?m)^mcp-confirm = \{ path = "\.".*\n', "", text)
text = re.sub(r'(?m)^mcp-confirm-demo = \{ path = "demo".*\n', "", text)
text = re.sub(r'(?m)^mcp-confirm-log = \{ path = "log".*\n', "", text)
text = re.sub(r'(?ms)^\[\[bench\]\]\n.*?(?=^\[)', "", text)
text, members = re.subn(r'(?m)^members = \[.*\]$', 'members = ["macros"]', text)
text, defaults = re.subn(r'(?m)^default-members = \[.*\]$', 'default-members = ["."]', text)
assert members == 1 and defaults == 1, "the workspace table changed: update .ci/features.sh"
open(path, "w").write(text)
PY
# The main target directory: the registry crates are already built there (a copy of the package
# at another path gets its own artifacts, and leaves the main ones alone).
export CARGO_TARGET_DIR=$root/target
cd "$work/pkg"
for features in "" fs redis redis-cluster postgres rmcp macros testing test-support webhooks pages passkeys metrics otel; do
  echo "== --no-default-features ${features:+--features $features}: build, unit tests"
  cargo build -q --lib --no-default-features ${features:+--features "$features"}
  # The scanner's long adversarial runs are the same whatever the features: once, in the first.
  skip=()
  [[ -n $features ]] && skip=(-- --skip message::adversarial --skip message::tests::generated)
  cargo test -q --lib --no-default-features ${features:+--features "$features"} "${skip[@]}" \
    >"$work/test.log" 2>&1 || { cat "$work/test.log"; exit 1; }
  grep -E "^test result" "$work/test.log"
done
cd "$root"
# The decision log's crate, with no feature and each alone.
for features in "" postgres metrics; do
  echo "== mcp-confirm-log ${features:+--features $features}: build"
  cargo build -q -p mcp-confirm-log ${features:+--features "$features"}
done
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "== docs as docs.rs builds them (nightly, --cfg docsrs, all features)"
  RUSTDOCFLAGS="--cfg docsrs -D warnings" cargo +nightly doc -q --no-deps --all-features \
    --target-dir "$work/doc"
else
  echo "== no nightly toolchain: the docs.rs configuration (--cfg docsrs) is not checked; the stable docs step covers the rest"
fi
echo "== feature builds passed"
