"""From what the user named (a registry name, a GGUF file, an HF or EXL2 directory, or nothing) to a checked
model on disk.

Every problem a user can fix (a missing file, a model not pulled yet, a truncated or corrupt file, a
directory without config or weights) becomes one ModelError line that names the file and the fix. The
checks are cheap (headers and sizes, never whole-file reads), except that a registry model whose checksum
was never recorded is hashed once.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from codecue.errors import ModelError
from codecue.models.gguf_reader import check_gguf_header, read_gguf_header
from codecue.models.provision import is_pulled, is_verified, model_path, partial_path, pull, verify
from codecue.models.registry import DEFAULTS, REGISTRY, ModelSpec, Role, check_role
from codecue.options import TABLES, OptionError, check
from codecue.paths import config_path, read_config_table

log = logging.getLogger(__name__)

ModelKind = Literal["hf", "gguf", "exl2"]

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
# Tensor names only exllamav2's EXL2 format uses (GPTQ spells them qweight/qzeros/scales/g_idx).
_EXL2_TENSOR_SUFFIXES = (".q_groups", ".q_invperm", ".q_scale_max")
_SAFETENSORS_MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class ModelSource:
    """A model that passed the cheap checks: what kind it is, where it is, and its registry entry if any."""

    kind: ModelKind
    path: Path
    name: str
    spec: ModelSpec | None = None


def read_models_config() -> dict[str, Any]:
    """The ``[models]`` table of the user's config, or {} (with a warning) when it is missing or broken."""
    return read_config_table("models")


def configured_model(role: Role) -> str | None:
    """The user's configured model reference for ``role``, if a usable one is set; a bad one is logged
    with the message ``--target`` / ``--draft`` and an editor's ``model`` option get for it."""
    check_role(role)
    value = read_models_config().get(role)
    try:
        return check(TABLES["models"][role], value)
    except OptionError as exc:
        log.warning("%s: %s; using the default", config_path(), exc)
        return None


def resolve_model(ref: str | None, role: str, *, auto_pull: bool = False) -> ModelSource:
    """Find and check the model for ``role`` ("target" or "draft").

    ``ref`` is a registry name, a GGUF file, or an HF / EXL2 model directory; None means the user's
    config (``[models] target = ...``) or else the registry default. A relative path in the config is
    taken relative to the config file. With ``auto_pull`` a registry model that is missing is pulled.
    """
    check_role(role)
    checked_role = cast(Role, role)
    origin = f"--{role}"
    base: Path | None = None
    if ref is None:
        ref = configured_model(checked_role)
        if ref is not None:
            origin = f"[models] {role} in {config_path()}"
            base = config_path().parent
        else:
            ref = DEFAULTS[checked_role]
            origin = "the default"
    ref = ref.strip()
    if ref in REGISTRY:
        return _resolve_registry(REGISTRY[ref], auto_pull)

    path = Path(ref).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    path = path.absolute()  # messages name the file unambiguously
    if not path.exists():
        if _looks_like_a_name(ref):
            known = ", ".join(sorted(REGISTRY))
            raise ModelError(
                f"unknown model {ref!r} (from {origin}): not a registry name, nor an existing file or directory",
                fix=f"use one of {known}, or a path to a GGUF file or a model directory",
            )
        raise ModelError(f"model path not found: {path} (from {origin})", fix="check the path, or use a registry name (see `codecue models list`)")
    for spec in REGISTRY.values():  # the registry file given by path gets the registry's checks
        if path.resolve() == model_path(spec).resolve():
            return _resolve_registry(spec, auto_pull)
    if path.is_dir():
        return _resolve_directory(path)
    return resolve_gguf_file(path)


def _looks_like_a_name(ref: str) -> bool:
    return "/" not in ref and "\\" not in ref and not ref.startswith(("~", ".")) and not ref.endswith(".gguf")


def _resolve_registry(spec: ModelSpec, auto_pull: bool) -> ModelSource:
    path = model_path(spec)
    if not is_pulled(spec):
        if auto_pull:
            pull(spec)
        elif path.is_file():
            raise ModelError(
                f"model file {path} is {path.stat().st_size:,} bytes, expected {spec.size:,} (truncated or corrupt)",
                fix=f"run `codecue models pull --force {spec.name}`",
            )
        else:
            interrupted = " (an earlier download was interrupted)" if partial_path(spec).exists() else ""
            raise ModelError(
                f"model {spec.name} is not downloaded yet{interrupted}: {path}",
                fix=f"run `codecue models pull {spec.name}`" if spec.name not in DEFAULTS.values()
                else "run `codecue models pull`",
            )
    if not is_verified(spec):
        # Pulled by hand or by an older CodeCue: check the checksum once, then trust the marker.
        log.info("checking %s once (sha256)", path)
        try:
            verify(spec)
        except ModelError:
            if not auto_pull:
                raise
            pull(spec, force=True)
    check_gguf_header(path)
    return ModelSource("gguf", path, spec.name, spec)


def resolve_gguf_file(path: Path) -> ModelSource:
    """A GGUF file checked as any the user names is (not a download in progress; tensors present)."""
    if path.name.endswith(".partial"):
        raise ModelError(f"{path} is an unfinished download, not a model", fix="run `codecue models pull`")
    header = read_gguf_header(path)
    if not header.tensors:
        raise ModelError(f"GGUF file {path} holds no tensors", fix="give a complete model GGUF")
    name = path.name[: -len(".gguf")] if path.name.endswith(".gguf") else path.name
    return ModelSource("gguf", path, name)


def _resolve_directory(path: Path) -> ModelSource:
    config_file = path / "config.json"
    if not config_file.is_file():
        ggufs = sorted(path.glob("*.gguf"))
        hint = f"; it holds {ggufs[0].name}, pass that GGUF file instead" if ggufs else ""
        raise ModelError(
            f"{path} is not a model directory: it has no config.json{hint}",
            fix="give a Hugging Face or EXL2 model directory with config.json, tokenizer and weights, or a .gguf file",
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"{config_file} is not valid JSON: {exc}", fix="restore the model's config.json") from None
    if not isinstance(config, dict):
        raise ModelError(f"{config_file} is not a JSON object", fix="restore the model's config.json")

    weights = _weight_files(path)
    if not weights:
        raise ModelError(
            f"{path} has a config.json but no weights (*.safetensors or pytorch_model*.bin)",
            fix="copy the model's weight files into it",
        )
    if not any((path / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelError(
            f"{path} has no tokenizer (none of {', '.join(_TOKENIZER_FILES)})",
            fix="copy the model's tokenizer files into it",
        )
    tensor_names: set[str] = set()
    for weight in weights:
        if weight.suffix == ".safetensors":
            tensor_names |= _check_safetensors(weight)
    kind: ModelKind = "exl2" if _is_exl2(config, tensor_names) else "hf"
    return ModelSource(kind, path, path.name)


def _weight_files(path: Path) -> list[Path]:
    """The weight files a directory's model needs; shards named by an index must all be there."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = path / index_name
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                shards = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ModelError(f"{index} is not a valid weight index: {exc}", fix="restore it") from None
            missing = [shard for shard in shards if not (path / shard).is_file()]
            if missing:
                raise ModelError(
                    f"{path} is missing weight shard {missing[0]} (listed in {index_name})"
                    + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""),
                    fix="finish copying or downloading the model",
                )
            return [path / shard for shard in shards]
    return sorted(path.glob("*.safetensors")) or sorted(path.glob("pytorch_model*.bin"))


def _check_safetensors(path: Path) -> set[str]:
    """Read a safetensors header; a ModelError if the file is shorter than its tensors need."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            prefix = f.read(8)
            header_len = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else -1
            if not 2 <= header_len <= min(_SAFETENSORS_MAX_HEADER, size - 8):
                raise ValueError("bad header length")
            header = json.loads(f.read(header_len))
        end = max(
            (int(info["data_offsets"][1]) for key, info in header.items() if key != "__metadata__"),
            default=0,
        )
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ModelError(f"weights file {path} is corrupt ({exc})", fix="re-download the model") from None
    if 8 + header_len + end > size:
        raise ModelError(
            f"weights file {path} is truncated ({size:,} bytes, its tensors need {8 + header_len + end:,})",
            fix="re-download the model",
        )
    return {key for key in header if key != "__metadata__"}


def _is_exl2(config: dict[str, Any], tensor_names: set[str]) -> bool:
    """exllamav2 writes ``quantization_config.quant_method = "exl2"``; older conversions only show in tensor names."""
    quantization = config.get("quantization_config")
    if isinstance(quantization, dict) and str(quantization.get("quant_method", "")).lower() == "exl2":
        return True
    return any(name.endswith(_EXL2_TENSOR_SUFFIXES) for name in tensor_names)
