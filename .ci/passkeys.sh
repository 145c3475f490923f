#!/usr/bin/env bash
# Four eyes with a passkey in real Chromium (.ci/clients/passkeys.mjs): bob registers a passkey
# on /passkeys with Chromium's virtual authenticator (DevTools' WebAuthn domain, through
# playwright-core), alice asks to shred one of two "Standup" notes in the team workspace, the
# signed webhook the server sends is verified by a receiver in the driver, alice cannot approve
# her own request, bob approves from his inbox with his passkey, and alice's retry deletes exactly
# the note he chose, once; after bob removes his passkey a new approval asks him for one.
#
# WebAuthn takes no IP address as a relying party: the server listens on 127.0.0.1 and is reached
# at http://localhost:PORT (--public-url). Installs what it needs through .ci/headless.sh; the
# server's log and the driver's output go to <target>/browser.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/headless.sh
work=$(mktemp -d)
mkdir -p "$out"
rm -f "$out"/passkeys-*
server_log=$out/passkeys-server.log
server=
cleanup() {
  if [[ -n $server ]] && kill -0 "$server" 2>/dev/null; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
die() {
  echo "FAILED after ${SECONDS}s: $*" >&2
  echo "--- notes server log ($server_log) ---" >&2; cat "$server_log" >&2 || true
  exit 1
}

echo "== start the notes server at http://localhost:PORT, webhooks to a local receiver"
started=
for _attempt in 1 2 3; do # a port found free may be taken before the server binds it
  port=$(free_port)
  hook_port=$(free_port)
  [[ $hook_port != "$port" ]] || continue
  : >"$server_log"
  NO_COLOR=1 "$server_bin" --addr "127.0.0.1:$port" --public-url "http://localhost:$port" \
    --data-dir "$work/notes-$_attempt" --webhook-url "http://127.0.0.1:$hook_port/hooks" \
    --webhook-secret-file "$work/webhook-$_attempt.secret" >"$server_log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do
    grep -q "^notes MCP server .* on http://127\.0\.0\.1:$port/mcp$" "$server_log" && { started=1; break; }
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n $started ]] && break
  kill -0 "$server" 2>/dev/null && die "the notes server did not print its URL within 10 s"
  grep -qi "in use" "$server_log" || die "the notes server exited"
  echo "port $port was taken, trying another"
  server=
done
[[ -n $started ]] || die "the notes server found no free port in three tries"
grep -q "register one at http://localhost:$port/passkeys (relying party localhost)" "$server_log" \
  || die "the server does not announce its passkey page at http://localhost:$port"
secret_file=$work/webhook-$_attempt.secret
[[ $(stat -c %a "$secret_file") == 600 ]] || die "the webhook secret file is not mode 0600"
! grep -qF "$(cat "$secret_file")" "$server_log" || die "the server printed the webhook secret"
data_dir=$(realpath "$work/notes-$_attempt")
lap
echo "notes server at http://localhost:$port/mcp ($took)"

echo "== in headless Chromium: register, ask, webhook, four eyes, approve with the passkey, retry"
status=0
MCP_URL="http://localhost:$port/mcp" DATA_DIR=$data_dir WEBHOOK_PORT=$hook_port \
  WEBHOOK_SECRET_FILE=$secret_file CHROMIUM=$chromium_bin PLAYWRIGHT_FROM=$node_dir OUT=$out \
  "$node" .ci/clients/passkeys.mjs 2>&1 | tee "$out/passkeys-driver.out" || status=$?
[[ $status -eq 0 ]] || die "the passkey drive failed (exit $status); screenshots in $out"
! grep -q "panicked" "$server_log" || die "the notes server panicked"
lap
echo "== four eyes with a passkey passed in ${SECONDS}s"
