"""The language server with a remote backend (``codecue serve --remote URL``), configured as a user would."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from harness.lsp import LspClient
from harness.server import in_process_cmd, server_env

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (a refused connection, or one to listen on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_config(tmp: Path, **remote: object) -> Path:
    """A config dir whose config.toml has a ``[remote]`` table with these keys."""
    cfg = tmp / "cfg"
    cfg.mkdir(exist_ok=True)
    lines = ["[remote]"] + [f"{k} = {json.dumps(v)}" for k, v in remote.items()]
    (cfg / "config.toml").write_text("\n".join(lines) + "\n")
    return cfg


async def start_remote_server(model_dir: Path, url: str, cfg: Path, tmp: Path, *extra: str,
                              key: str | None = None) -> LspClient:
    """The server on ``url`` with config dir ``cfg``, logging at -vv into ``tmp``/server.stderr (read it with
    ``stderr_text()``); ``key`` is put in ``$CODECUE_TEST_KEY`` for a config's ``api_key_env``."""
    env = server_env(tmp)
    env["CODECUE_CONFIG_DIR"] = str(cfg)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])  # this checkout's codecue
    if key is not None:
        env["CODECUE_TEST_KEY"] = key
    argv = in_process_cmd(model_dir, "--remote", url, *extra)
    argv.insert(argv.index("codecue.cli") + 1, "-vv")  # debug logs: a key must not be in them either
    return LspClient(argv, env, stderr=tmp / "server.stderr")
