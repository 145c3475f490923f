# Sourced by .ci/inspector.sh and .ci/gateway-inspector.sh, after .ci/headless.sh (which installs
# the Inspector and defines $node, $node_dir, $out, free_port and lap): starts the MCP Inspector's
# web UI (the launcher's --web mode) seeded with one server, on a free port.
#
#   start_inspector_ui NAME SERVER_URL [LAUNCHER ARGS…]
#
# NAME prefixes what it writes to $out (NAME.out, the launcher's output; NAME-log.jsonl, its log);
# SERVER_URL is the MCP server's Streamable HTTP URL; the remaining arguments go to the launcher
# (e.g. --header "Authorization: Bearer …", which the Inspector's backend sends on every request
# to the server). The server is seeded with the modern (2026-07-28) protocol era. Its web server
# needs a fixed port (CLIENT_PORT, retried on another free port when it is taken before the
# Inspector binds it); the MCP Apps sandbox and app-origin servers take any free one (0). Its API
# stays authenticated with a token of ours. HOME and its storage dir are throwaway (under $work,
# which the caller makes and removes), secrets stay in memory, and it opens no browser itself.
# Sets $inspector (its pid, for the caller's cleanup), $ui_port and $ui_url (the web UI with its
# API token). Calls the caller's die on failure.

start_inspector_ui() {
  local name=$1 server_url=$2
  shift 2
  local ui_token attempt
  ui_token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
  mkdir -p "$work/home" "$work/storage"
  ui_url=
  for attempt in 1 2 3; do # the port we found free may be taken before the Inspector binds it
    ui_port=$(free_port)
    (
      cd "$work"
      HOME=$work/home MCP_STORAGE_DIR=$work/storage MCP_INSPECTOR_SECRET_STORE=memory \
      CLIENT_PORT=$ui_port MCP_SANDBOX_PORT=0 MCP_APP_ORIGIN_PORT=0 HOST=127.0.0.1 \
      MCP_INSPECTOR_API_TOKEN=$ui_token MCP_AUTO_OPEN_ENABLED=false MCP_LOG_FILE=$out/$name-log.jsonl \
      exec "$node" "$node_dir/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js" \
        --web --transport http --server-url "$server_url" --protocol-era modern "$@"
    ) >"$out/$name.out" 2>&1 &
    inspector=$!
    for _ in $(seq 1 300); do
      grep -q "is up and running at" "$out/$name.out" && { ui_url="http://127.0.0.1:$ui_port/?MCP_INSPECTOR_API_TOKEN=$ui_token"; break; }
      kill -0 "$inspector" 2>/dev/null || break
      sleep 0.1
    done
    [[ -n $ui_url ]] && return 0
    kill -0 "$inspector" 2>/dev/null && die "the Inspector's web UI did not come up within 30 s"
    grep -q "PORT IS IN USE" "$out/$name.out" || die "the Inspector exited"
    echo "port $ui_port was taken, trying another (attempt $attempt)"
  done
  die "the Inspector found no free port in three tries"
}
