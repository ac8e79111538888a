"""Where CodeCue keeps its files, and how it writes them (atomically)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs

APP = "codecue"


def cache_dir() -> Path:
    """Models and other re-creatable data. ``CODECUE_CACHE_DIR`` overrides the platform default."""
    return Path(os.environ.get("CODECUE_CACHE_DIR") or platformdirs.user_cache_dir(APP))


def config_dir() -> Path:
    """Profiles and user settings. ``CODECUE_CONFIG_DIR`` overrides the platform default."""
    return Path(os.environ.get("CODECUE_CONFIG_DIR") or platformdirs.user_config_dir(APP))


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


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode)
