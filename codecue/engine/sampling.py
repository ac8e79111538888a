"""How tokens are chosen (greedy, or temperature and top-p), and the random streams that choose them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class RandomStream(IntEnum):
    """One seeded stream per sampler: the draft samples with its own, so that the verification stream,
    and with it the output, is the same with or without a draft."""

    VERIFY = 0
    DRAFT = 1


@dataclass(frozen=True)
class Sampling:
    """Greedy when ``temperature`` is 0; ``seed`` makes sampled output reproducible (None: a fresh seed)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def generator(self, stream: RandomStream) -> torch.Generator | None:
        """A generator for ``stream``, seeded ``seed + stream``; None when greedy (nothing is drawn)."""
        if self.greedy:
            return None
        import torch

        generator = torch.Generator()
        generator.manual_seed((self.seed if self.seed is not None else torch.seed()) + stream)
        return generator
