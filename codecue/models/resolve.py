"""From what the user named (a registry name, a GGUF file, an HF or EXL2 directory, or nothing) to a checked
model on disk.

Every problem a user can fix (a missing file, a model not pulled yet, a truncated or corrupt file, a
directory without config or weights) becomes one ModelError line that names the file and the fix. The
checks are cheap (headers and sizes, never whole-file reads), except that a registry model whose checksum
was never recorded is hashed once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from codecue.errors import ModelError
from codecue.models.provision import is_pulled, is_verified, model_path, partial_path, pull, verify
from codecue.models.registry import DEFAULTS, REGISTRY, ModelSpec, Role, check_role
from codecue.paths import config_path, read_config_table

log = logging.getLogger(__name__)

ModelKind = Literal["hf", "gguf", "exl2"]

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)
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
    """The user's configured model reference for ``role``, if a usable one is set."""
    check_role(role)
    value = read_models_config().get(role)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        log.warning("ignoring [models] %s in %s: it must be a model name or a path; using the default",
                    role, config_path())
        return None
    return value.strip()


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
    return _resolve_gguf_file(path)


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


def check_gguf_header(path: Path) -> None:
    """Cheap check of a GGUF file's fixed header: magic, version and plausible counts."""
    try:
        with open(path, "rb") as f:
            header = f.read(24)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror or exc}") from None
    if len(header) < 24 or header[:4] != GGUF_MAGIC:
        found = "empty" if not header else f"starts with {header[:4]!r}"
        raise ModelError(
            f"{path} is not a GGUF file ({found}, expected the magic {GGUF_MAGIC!r})",
            fix="give a .gguf model file, or re-download it",
        )
    version, tensor_count, kv_count = struct.unpack("<IQQ", header[4:24])
    if version not in GGUF_VERSIONS or tensor_count > 1_000_000 or kv_count > 1_000_000:
        raise ModelError(
            f"{path} has a corrupt or unsupported GGUF header (version {version})",
            fix="re-download the file or convert it with a current llama.cpp",
        )


def _resolve_gguf_file(path: Path) -> ModelSource:
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


@dataclass(frozen=True)
class GGUFTensorInfo:
    name: str
    ggml_type: int
    shape: tuple[int, ...]  # ggml order: the fastest-varying dimension first, e.g. [n_embd, n_vocab]
    offset: int  # from the start of the file
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """A GGUF file's metadata and tensor directory, without its weights.

    Scalar and string metadata are kept as values; arrays only as their length, except that the token list
    is fingerprinted on the way (its sha256), so two tokenizers compare without holding 150k strings.
    """

    path: Path
    version: int
    metadata: dict[str, Any]
    array_lengths: dict[str, int]
    tokens_sha256: str | None
    tensors: tuple[GGUFTensorInfo, ...]
    data_offset: int
    file_size: int


class _Truncated(Exception):
    pass


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """Parse a GGUF header and check that every tensor lies within the file (truncation) — in a fraction of a
    second, where gguf's GGUFReader takes seconds on a 150k-token vocabulary because it builds a numpy view
    per array item. A ModelError names the file on any corruption."""
    import mmap

    from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType

    path = Path(path)
    check_gguf_header(path)
    size = path.stat().st_size
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            parser = _GGUFParser(data)
            parser.offset = 4  # past the magic
            version, tensor_count, kv_count = parser.unpack("<IQQ")
            metadata: dict[str, Any] = {}
            array_lengths: dict[str, int] = {}
            tokens_sha256: str | None = None
            for _ in range(kv_count):
                key = parser.string()
                value_type = parser.unpack("<I")[0]
                if value_type == _GGUF_ARRAY:
                    item_type, count = parser.unpack("<IQ")
                    digest = hashlib.sha256() if key == "tokenizer.ggml.tokens" else None
                    parser.skip_array(item_type, count, digest)
                    array_lengths[key] = count
                    if digest is not None:
                        tokens_sha256 = digest.hexdigest()
                else:
                    metadata[key] = parser.value(value_type)
            alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
            if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
                raise ValueError(f"invalid alignment {alignment!r}")
            infos = []
            for _ in range(tensor_count):
                name = parser.string()
                (n_dims,) = parser.unpack("<I")
                if n_dims > 8:
                    raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
                shape = parser.unpack(f"<{n_dims}Q")
                ggml_type, offset = parser.unpack("<IQ")
                infos.append((name, ggml_type, tuple(shape), offset))
            data_offset = -(-parser.offset // alignment) * alignment
    except _Truncated:
        raise ModelError(f"GGUF file {path} is truncated (its header runs past the end of the file)",
                         fix="re-download or re-convert it") from None
    except (ValueError, UnicodeDecodeError, OSError, struct.error) as exc:
        raise ModelError(f"GGUF file {path} is corrupt ({exc})", fix="re-download or re-convert it") from None

    tensors = []
    end = data_offset
    for name, ggml_type, shape, offset in infos:
        try:
            block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
        except (ValueError, KeyError):
            raise ModelError(f"GGUF file {path} has tensor {name!r} of unknown type {ggml_type}",
                             fix="re-download it, or update the gguf package") from None
        n_elements = 1
        for dim in shape:
            n_elements *= dim
        n_bytes = n_elements * type_size // block_size
        tensors.append(GGUFTensorInfo(name, ggml_type, shape, data_offset + offset, n_bytes))
        end = max(end, data_offset + offset + n_bytes)
    if end > size:
        raise ModelError(
            f"GGUF file {path} is truncated ({size:,} bytes, its tensors need {end:,})",
            fix="re-download or re-convert it",
        )
    return GGUFHeader(path, version, metadata, array_lengths, tokens_sha256, tuple(tensors), data_offset, size)


_GGUF_STRING = 8
_GGUF_ARRAY = 9
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class _GGUFParser:
    """Little-endian reads from a memory map, raising _Truncated at the end of the data."""

    def __init__(self, data: Any) -> None:
        self.data = data
        self.offset = 0

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        n = struct.calcsize(fmt)
        if self.offset + n > len(self.data):
            raise _Truncated
        values = struct.unpack_from(fmt, self.data, self.offset)
        self.offset += n
        return values

    def raw_string(self) -> bytes:
        (n,) = self.unpack("<Q")
        if self.offset + n > len(self.data):
            raise _Truncated
        raw = self.data[self.offset : self.offset + n]
        self.offset += n
        return raw

    def string(self) -> str:
        return self.raw_string().decode("utf-8")

    def value(self, value_type: int) -> Any:
        if value_type == _GGUF_STRING:
            return self.string()
        if value_type in _GGUF_SCALARS:
            return self.unpack(_GGUF_SCALARS[value_type])[0]
        raise ValueError(f"unknown metadata type {value_type}")

    def skip_array(self, item_type: int, count: int, digest: Any | None) -> None:
        if item_type == _GGUF_STRING:
            for _ in range(count):
                raw = self.raw_string()
                if digest is not None:
                    digest.update(len(raw).to_bytes(4, "little"))
                    digest.update(raw)
        elif item_type == _GGUF_ARRAY:
            for _ in range(count):
                inner_type, inner_count = self.unpack("<IQ")
                self.skip_array(inner_type, inner_count, None)
        elif item_type in _GGUF_SCALARS:
            n = struct.calcsize(_GGUF_SCALARS[item_type]) * count
            if self.offset + n > len(self.data):
                raise _Truncated
            self.offset += n
        else:
            raise ValueError(f"unknown array item type {item_type}")


@dataclass(frozen=True)
class GGUFVocab:
    """What a draft and a target must agree on: logits width and the tokenizer's token list."""

    path: Path
    architecture: str | None
    vocab_size: int  # rows of the token embedding, i.e. the width of the logits
    n_tokens: int  # entries in tokenizer.ggml.tokens
    tokenizer_model: str | None
    tokens_sha256: str | None  # fingerprint of the token list; equal lists, equal fingerprints


def read_gguf_vocab(path: str | Path) -> GGUFVocab:
    """The vocabulary facts of a GGUF file, from its header alone (no weights are read)."""
    header = read_gguf_header(path)
    architecture = header.metadata.get("general.architecture")
    architecture = architecture if isinstance(architecture, str) else None
    tokenizer_model = header.metadata.get("tokenizer.ggml.model")
    n_tokens = header.array_lengths.get("tokenizer.ggml.tokens", 0)
    vocab_size = header.metadata.get(f"{architecture}.vocab_size") if architecture else None
    if not isinstance(vocab_size, int) or vocab_size <= 0:
        embeddings = [t for t in header.tensors if t.name in ("token_embd.weight", "output.weight")]
        vocab_size = embeddings[0].shape[-1] if embeddings else n_tokens
    if not vocab_size:
        raise ModelError(f"GGUF file {header.path} has no vocabulary (no tokens, no token embedding)",
                         fix="use a complete language-model GGUF")
    return GGUFVocab(
        header.path,
        architecture,
        vocab_size,
        n_tokens,
        tokenizer_model if isinstance(tokenizer_model, str) else None,
        header.tokens_sha256,
    )


def read_gguf_vocab_size(path: str | Path) -> int:
    """The logits width of a GGUF model (its token-embedding rows)."""
    return read_gguf_vocab(path).vocab_size
