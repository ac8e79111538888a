"""Reading rows of logits of either kind a backend returns (:data:`codecue.backends.base.Logits`): a numpy
array (llama.cpp) or a torch tensor (the torch and exllamav2 backends).

Greedy decoding only reads argmaxes and a draft's confidence, which both kinds answer without torch, so a
model process serving llama.cpp greedily never imports it (seconds of CPU on a few cores, taken from a
cold start). Sampling computes with torch and takes its rows as tensors (:func:`as_tensor`); the
first sampled completion in such a process pays for the import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from codecue.backends.base import is_numpy

if TYPE_CHECKING:
    import torch

    from codecue.backends.base import Logits


def argmax_rows(rows: Logits) -> list[int]:
    """Each row's most likely token (the first of equal maxima, as both numpy and torch pick it)."""
    return rows.argmax(-1).tolist()


def row_softmax(row: Logits) -> Logits:
    """The probabilities of one row of logits, of the row's kind, in float32."""
    if row.ndim != 1:
        raise ValueError(f"one row of logits expected, got shape {tuple(row.shape)}")
    if is_numpy(row):
        import numpy as np

        weights = np.exp(row - row.max(), dtype=np.float32)
        return weights / weights.sum()
    import torch

    return torch.softmax(row.float(), dim=-1)


def as_tensor(rows: Logits) -> torch.Tensor:
    """The rows as a torch tensor (a numpy array's memory is shared, not copied)."""
    import torch

    return torch.as_tensor(rows)
