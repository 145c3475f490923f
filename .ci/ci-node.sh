# Sourced (with $repo set to the repository) by .ci/conformance.sh and .ci/gateway-conformance.sh:
# Node 22 and the official conformance suite, pinned, installed from npm into <target>/ci-node
# (reused when the pinned versions are already there), its node_modules/.bin first on PATH. Sets
# target_dir, node_dir and suite_dir. The system Node may be older; the suite needs Node 22.

node_version=22.23.3
suite_version=0.2.0-alpha.12
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in /*) ;; *) target_dir=$repo/$target_dir ;; esac
node_dir=$target_dir/ci-node
suite_dir=$node_dir/node_modules/@modelcontextprotocol/conformance

installed_version() { # the version of an installed npm package, or nothing
  local manifest=$node_dir/node_modules/$1/package.json
  [[ -f $manifest ]] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
  return 0
}

echo "== Node $node_version and @modelcontextprotocol/conformance@$suite_version in $node_dir"
if [[ $(installed_version node) == "$node_version" &&
      $(installed_version @modelcontextprotocol/conformance) == "$suite_version" ]]; then
  echo "already installed"
else
  mkdir -p "$node_dir"
  cat >"$node_dir/package.json" <<JSON
{
  "name": "mcp-confirm-ci-node",
  "private": true,
  "dependencies": {
    "node": "$node_version",
    "@modelcontextprotocol/conformance": "$suite_version"
  }
}
JSON
  (cd "$node_dir" && npm install --no-audit --no-fund --loglevel=error)
fi
export PATH=$node_dir/node_modules/.bin:$PATH
echo "node $(node --version)"
