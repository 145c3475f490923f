#!/usr/bin/env bash
# Builds every program the CI scripts start (the notes server and client, the load generator, the
# conformance fixture, the gateway, mcp-confirm-audit) in one command whose package and feature
# selection is the README's test command's: every workspace member (the default members), every
# feature, dev-dependencies active (examples need them). Cargo resolves dependency features per
# selection, so a script that built only its own program (`-p`, `--features`, no
# `--all-features`) rebuilt shared dependencies with other features, and the notes server once
# per selection. After `cargo test --all-features` this links what the tests did not.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --all-features --bins --examples
