"""Reading rows of logits of either kind a backend returns (:data:`codecue.backends.base.Logits`): a numpy
array (llama.cpp) or a torch tensor (the torch and exllamav2 backends).

Greedy decoding only reads argmaxes and a draft's confidence, which both kinds answer without torch, so a
model process serving llama.cpp greedily never imports it (about 1.5-2.5 s of CPU on a 2-core machine,
most of a cold start's). Sampling computes with torch and takes its rows as tensors (:func:`as_tensor`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from codecue.backends.base import Logits


def is_numpy(rows: Any) -> bool:
    return type(rows).__module__ == "numpy"


def argmax_rows(rows: Logits) -> list[int]:
    """Each row's most likely token (the first of equal maxima, as both numpy and torch pick it)."""
    return rows.argmax(-1).tolist()


def softmax(row: Logits) -> Logits:
    """Probabilities of one row of logits, in float32 (float64 from numpy's exp would only cost time)."""
    if is_numpy(row):
        import numpy as np

        shifted = np.exp(row - row.max(), dtype=np.float32)
        return shifted / shifted.sum()
    import torch

    return torch.softmax(row.float(), dim=-1)


def as_tensor(rows: Logits) -> torch.Tensor:
    """The rows as a torch tensor (a numpy array's memory is shared, not copied)."""
    import torch

    return torch.as_tensor(rows)
