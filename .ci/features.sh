#!/usr/bin/env bash
# The builds users get. The crate's own dev-dependency turns every feature on for its tests, so
# `cargo test` never sees a default build; this script checks, in a copy of the package without
# that dev-dependency (and without the tests, examples and benches that need it), that the library
# builds with no features and its unit tests pass with no features and with each feature alone
# (which compiles every item under that feature), and that the docs
# build as docs.rs builds them (nightly, `--cfg docsrs`) when a nightly toolchain is installed.
set -euo pipefail
SECONDS=0 # each line below says how long the script has run so far
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
text = re.sub(r'(?m)^mcp-confirm-pages = \{ path = "pages".*\n', "", text)
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
# A unit-test build compiles every item of the library (with its tests): the library has no
# `cfg(not(test))` code, which the check below keeps so. So each feature alone is compiled once,
# as its unit tests, and only the build with no features (what `default = []` gives users) is
# also built as users build it.
if grep -rn --include='*.rs' 'not(test)' src; then
  echo "the library has code compiled only outside tests: build each feature alone with cargo build too" >&2
  exit 1
fi
for features in "" fs redis redis-cluster postgres rmcp macros testing test-support metrics otel; do
  if [[ -z $features ]]; then
    echo "== [+$SECONDS s] --no-default-features: build, unit tests"
    cargo build -q --lib --no-default-features
  else
    echo "== [+$SECONDS s] --no-default-features --features $features: unit tests"
  fi
  # The scanner's long adversarial runs are the same whatever the features: once, in the first.
  skip=()
  [[ -n $features ]] && skip=(-- --skip message::adversarial --skip message::tests::generated)
  cargo test -q --lib --no-default-features ${features:+--features "$features"} "${skip[@]}" \
    >"$work/test.log" 2>&1 || { cat "$work/test.log"; exit 1; }
  grep -E "^test result" "$work/test.log"
done
cd "$root"
# The decision log's crate and its verifier, with no feature and each alone: checked (type-checked,
# no code generated: its tests and programs are built with every feature by the test run).
for features in "" postgres metrics; do
  echo "== [+$SECONDS s] mcp-confirm-log ${features:+--features $features}: check"
  cargo check -q -p mcp-confirm-log --lib --bins ${features:+--features "$features"}
done
# The pages' crate, with no feature and with passkeys: checked likewise.
for features in "" passkeys webhooks; do
  echo "== [+$SECONDS s] mcp-confirm-pages ${features:+--features $features}: check"
  cargo check -q -p mcp-confirm-pages --lib ${features:+--features "$features"}
done
# The core leaves the pages' dependencies to their crate: no HTML builder, no WebAuthn, no HTTP
# client.
if cargo tree -q -p mcp-confirm --all-features -e normal --prefix none | grep -E '^(maud|webauthn-rs|reqwest) '; then
  echo "the core depends on a page dependency again" >&2
  exit 1
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "== [+$SECONDS s] docs as docs.rs builds them (nightly, --cfg docsrs, all features)"
  RUSTDOCFLAGS="--cfg docsrs -D warnings" cargo +nightly doc -q --no-deps --all-features \
    --target-dir "$work/doc"
else
  echo "== [+$SECONDS s] no nightly toolchain: the docs.rs configuration (--cfg docsrs) is not checked; the stable docs step covers the rest"
fi
echo "== [+$SECONDS s] feature builds passed"
