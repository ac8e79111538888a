"""Where CodeCue keeps its files, and how it writes them (atomically)."""

from __future__ import annotations

import logging
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import platformdirs

APP = "codecue"
CONFIG_FILENAME = "config.toml"

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Models and other re-creatable data. ``CODECUE_CACHE_DIR`` overrides the platform default."""
    return Path(os.environ.get("CODECUE_CACHE_DIR") or platformdirs.user_cache_dir(APP))


def config_dir() -> Path:
    """Profiles and user settings. ``CODECUE_CONFIG_DIR`` overrides the platform default."""
    return Path(os.environ.get("CODECUE_CONFIG_DIR") or platformdirs.user_config_dir(APP))


def config_path() -> Path:
    """The user's settings file: ``<config_dir()>/config.toml``."""
    return config_dir() / CONFIG_FILENAME


def read_config_table(name: str) -> dict[str, Any]:
    """The ``[name]`` table of the user's config, or {} (with a warning) when it is missing or broken: a
    broken settings file must not stop completions."""
    path = config_path()
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        log.warning("ignoring %s, which is not valid TOML (%s); using the defaults", path, exc)
        return {}
    table = data.get(name, {})
    if not isinstance(table, dict):
        log.warning("ignoring %s: [%s] must be a table; using the defaults", path, name)
        return {}
    return table


def runtime_dir() -> Path:
    """The daemon's socket and pid file. ``CODECUE_RUNTIME_DIR`` overrides the platform default."""
    override = os.environ.get("CODECUE_RUNTIME_DIR")
    if override:
        return Path(override)
    try:
        return Path(platformdirs.user_runtime_dir(APP))
    except Exception:  # some platforms have no runtime dir; fall back to the cache dir
        return cache_dir() / "run"


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so that readers see either the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_json_object(path: Path) -> dict:
    """A JSON object from ``path``; an empty dict when the file is missing, unreadable or not an object
    (caches that are re-created when lost)."""
    import json

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)
