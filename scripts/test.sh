#!/usr/bin/env bash
# Install everything (as scripts/setup.sh does, without the demo) and run every test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-demo
export CODECUE_REQUIRE_REAL_MODELS=1  # the integration tests must run, not skip
printf '\n== python tests\n'
.venv/bin/python -m pytest -q -rs

printf '\n== VS Code extension: unit tests, build, package\n'
(cd editor_clients/vscode && npm ci --no-audit --no-fund --loglevel=error && npm test && npm run build && npm run package)
