"""Reading GGUF files without their weights: the fixed header check, the metadata and tensor directory,
and the vocabulary facts a draft and a target must agree on.

The parser reads the header in a fraction of a second, where gguf's ``GGUFReader`` takes seconds on a
150k-token vocabulary; gguf's constants give the tensor sizes. A ModelError names the file on any
corruption or truncation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecue.errors import ModelError
from codecue.paths import atomic_write_text, cache_dir

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)


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


HEADER_CACHE_VERSION = "1"


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """A GGUF file's header, every tensor checked to lie within the file (truncation). A ModelError names the
    file on any corruption.

    Parsing takes most of a second on a 150k-token vocabulary (each token is skipped and hashed), and every
    model load reads the header of both models, so what a parse found is kept in the cache, keyed by the
    file's path, size and modification time: a file changed in any way is parsed again.
    """
    path = Path(path)
    check_gguf_header(path)
    stat = path.stat()
    entry = _header_cache_entry(path, stat.st_size, stat.st_mtime_ns)
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
        return _header_from_json(path, data)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not cached yet, or unreadable: parse the file
    header = _parse_gguf_header(path, stat.st_size)
    try:
        atomic_write_text(entry, json.dumps(_header_to_json(header)))
    except (OSError, TypeError, ValueError) as exc:  # a read-only cache (or odd metadata) only costs time
        log.debug("GGUF header of %s not cached: %s", path, exc)
    return header


def _header_cache_entry(path: Path, size: int, mtime_ns: int) -> Path:
    raw = f"{HEADER_CACHE_VERSION}:{path.resolve()}:{size}:{mtime_ns}"
    return cache_dir() / "gguf_headers" / (hashlib.sha256(raw.encode()).hexdigest()[:24] + ".json")


def _header_to_json(header: GGUFHeader) -> dict[str, Any]:
    return {"version": header.version, "metadata": header.metadata, "array_lengths": header.array_lengths,
            "tokens_sha256": header.tokens_sha256, "data_offset": header.data_offset,
            "file_size": header.file_size,
            "tensors": [[t.name, t.ggml_type, list(t.shape), t.offset, t.n_bytes] for t in header.tensors]}


def _header_from_json(path: Path, data: dict[str, Any]) -> GGUFHeader:
    tensors = tuple(GGUFTensorInfo(name, int(ggml_type), tuple(int(d) for d in shape), int(offset), int(n_bytes))
                    for name, ggml_type, shape, offset, n_bytes in data["tensors"])
    return GGUFHeader(path, int(data["version"]), dict(data["metadata"]), dict(data["array_lengths"]),
                      data["tokens_sha256"], tensors, int(data["data_offset"]), int(data["file_size"]))


def _parse_gguf_header(path: Path, size: int) -> GGUFHeader:
    """Parse the header in one pass (gguf's GGUFReader takes seconds on a 150k-token vocabulary because it
    builds a numpy view per array item)."""
    import mmap

    from gguf.constants import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType
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
