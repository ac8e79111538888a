"""torch/transformers backend: HF model directories and GGUF files (dequantized), on CPU or CUDA.

On the CPU it can replace the target's linear layers by weight-only int8 ones (torch's packed-weight
``_weight_int8pack_mm``), so that the target stays quantized on this path too.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from codecue.backends.base import BackendBase
from codecue.errors import BackendUnavailable, ModelError
from codecue.paths import cache_dir

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


class WeightOnlyInt8Linear(torch.nn.Module):
    """A linear layer with int8 weights and per-output-channel scales (activations stay bf16).

    Decoding is bound by reading weights, so halving the bytes read per step is what matters on a CPU.
    """

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float()
        scales = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
        self.register_buffer("weight", torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(torch.bfloat16))
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().to(torch.bfloat16),
                                                                        requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, shape[-1]).to(torch.bfloat16), self.weight, self.scales)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features)


def quantize_int8_(model: torch.nn.Module) -> torch.nn.Module:
    """Replace every decoder ``nn.Linear`` (not the embedding-tied head) by :class:`WeightOnlyInt8Linear`."""
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and not (name == "" and child_name == "lm_head"):
                setattr(module, child_name, WeightOnlyInt8Linear(child))
    return model


@functools.lru_cache(maxsize=1)
def fastest_cpu_dtype() -> torch.dtype:
    """Measure a decode-shaped and a verify-shaped matmul in fp32 and bf16 and pick the faster dtype.

    bf16 wins on CPUs with AMX / AVX512-BF16 and loses badly on the others, so we measure rather than guess.
    Measured once per process: the target and the draft must not end up with different answers.
    """
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        w = torch.randn(4096, 1536, dtype=dtype)
        xs = [torch.randn(m, 1536, dtype=dtype) for m in (1, 9)]
        for x in xs:  # warm-up
            torch.nn.functional.linear(x, w)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for x in xs:
                for _ in range(4):
                    torch.nn.functional.linear(x, w)
            best = min(best, time.perf_counter() - t0)
        results[dtype] = best
    choice = min(results, key=results.get)
    log.info("CPU dtype probe: %s -> %s", {str(k): f"{v * 1e3:.2f} ms" for k, v in results.items()}, choice)
    return choice


def _padded_linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if x.dim() == 3 and x.shape[0] == 1 and x.shape[1] == 1:
        # Two identical rows take the batched (oneDNN, AVX-512 BF16) kernel; one row takes a slower
        # matrix-vector path with another summation order.
        return torch.nn.functional.linear(torch.cat([x, x], dim=1), self.weight, self.bias)[:, :1]
    return torch.nn.functional.linear(x, self.weight, self.bias)


@functools.lru_cache(maxsize=8)
def single_row_matmul_is_slow(dtype: torch.dtype, in_features: int = 1536, out_features: int = 8960) -> bool:
    """Does a one-row matmul take longer than a two-row one here? (bf16 on this AVX-512 BF16 CPU: yes —
    the single row goes through a matrix-vector kernel, two rows through the batched GEMM.)"""
    w = torch.randn(out_features, in_features, dtype=dtype)
    one = torch.randn(1, 1, in_features, dtype=dtype)
    two = torch.cat([one, one], dim=1)
    times = {1: [], 2: []}
    for _ in range(3):  # warm-up
        torch.nn.functional.linear(one, w)
        torch.nn.functional.linear(two, w)
    for _ in range(15):
        for rows, x in ((1, one), (2, two)):
            t0 = time.perf_counter()
            torch.nn.functional.linear(x, w)
            times[rows].append(time.perf_counter() - t0)
    one_t, two_t = sorted(times[1])[7], sorted(times[2])[7]
    log.info("single-row probe (%s): 1 row %.2f ms, 2 rows %.2f ms", dtype, one_t * 1e3, two_t * 1e3)
    return two_t < 0.9 * one_t


def linear_step_ms(hidden: int, ffn: int, layers: int, vocab: int, kv_dim: int, dtype: torch.dtype,
                   rows: int = 1, repeats: int = 3) -> float:
    """A cheap lower bound on a decoder step of that shape here: one layer's linear layers (q, k, v, o,
    gate, up, down) timed on random weights and counted ``layers`` times, plus the output head; attention,
    norms and the framework's overhead come on top in a real step. Seconds to measure, no model needed:
    what ``codecue doctor`` asks before converting and loading a model on torch that could not win."""
    shapes = [(hidden, hidden), (kv_dim, hidden), (kv_dim, hidden), (hidden, hidden), (ffn, hidden), (ffn, hidden),
              (hidden, ffn)]
    weights = [torch.randn(out, inp, dtype=dtype) for out, inp in shapes]
    head = torch.randn(vocab, hidden, dtype=dtype)
    x, wide = torch.randn(1, rows, hidden, dtype=dtype), torch.randn(1, rows, ffn, dtype=dtype)

    def layer() -> None:
        for w in weights:
            torch.nn.functional.linear(wide if w.shape[1] == ffn else x, w)

    def head_call() -> None:
        torch.nn.functional.linear(x, head)

    def best(fn) -> float:
        fn()  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    return (layers * best(layer) + best(head_call)) * 1e3


ROWWISE_ATTENTION = "codecue_rowwise"
#: Calls with more query rows than this (prompt prefill) take the ordinary batched attention.
ROWWISE_MAX_ROWS = 64


def _attend_one_row(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """One query position ``[B, H, 1, D]`` against its keys ``[B, KVH, L, D]``; returns ``[B, 1, H, D]``.

    Plain matmul-softmax-matmul, the query heads that share a key/value head stacked as rows of one matmul.
    """
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, key.transpose(-1, -2)) * scaling
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    return torch.matmul(probs, value).reshape(batch, 1, heads, dim)


def rowwise_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """Attention whose result for a row does not depend on how many rows the call has.

    Measured on the bf16 target here: the linear layers give bit-identical rows for a two-row (padded
    one-token step) and a nine-row call (a K=8 verification), but SDPA does not — a query row against its
    keys differs by ~1e-3 from the same row inside a causal block, which grows to ~0.1 in the logits and
    flips near-tie argmaxes, so speculative greedy output could differ from target-only greedy. Here each of
    a short call's rows is computed exactly as a one-token step at its position is (its query against the
    keys up to and including its own, no mask), which makes verification batch-invariant. Long calls
    (prefill) keep SDPA's batched kernel; target-only decoding prefills the same way.
    Assumes one unpadded sequence, which is what :class:`TorchBackend` holds.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_len, kv_len = query.shape[2], key.shape[2]
    if q_len > ROWWISE_MAX_ROWS:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    rows = []
    for i in range(q_len):
        end = kv_len - (q_len - 1 - i)  # causal: row i sees the keys up to its own position
        rows.append(_attend_one_row(query[:, :, i : i + 1], key[:, :, :end], value[:, :, :end], scaling))
    return torch.cat(rows, dim=1), None


@functools.cache
def _register_rowwise_attention() -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ROWWISE_ATTENTION, rowwise_attention_forward)
    AttentionMaskInterface.register(ROWWISE_ATTENTION, sdpa_mask)  # prefill still needs the causal mask
    return ROWWISE_ATTENTION


def use_rowwise_attention_(model: torch.nn.Module) -> None:
    """Switch ``model`` to :func:`rowwise_attention_forward` (see there)."""
    name = _register_rowwise_attention()
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:  # older transformers
        model.config._attn_implementation = name


def pad_single_rows_(model: torch.nn.Module) -> int:
    """Make every ``nn.Linear`` of ``model`` compute a single row as two; returns how many were patched."""
    count = 0
    for module in model.modules():
        if type(module) is torch.nn.Linear:
            module.forward = _padded_linear_forward.__get__(module)
            count += 1
    return count


def resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if device.startswith("cuda"):
            return torch.bfloat16
        return fastest_cpu_dtype()
    if dtype == "int8":
        return torch.bfloat16
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; choose auto, float32, bfloat16, float16 or int8") from None


#: transformers' advice on loading a quantized GGUF in another dtype than float32 (its packed-weight kernels
#: compute in float32). CodeCue chooses the dtype itself (bf16 where that is fastest here) and keeps a
#: dequantized copy, so the advice is not for its users; it printed during `scripts/setup.sh`.
GGUF_DTYPE_ADVICE = "Loading a GGUF checkpoint with its weights packed is fastest in float32"
_GGUF_QUANTIZER_LOGGER = "transformers.quantizers.quantizer_gguf"


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


@contextmanager
def without_gguf_dtype_advice() -> Iterator[None]:
    """Drop exactly :data:`GGUF_DTYPE_ADVICE` from transformers' GGUF loader while loading a GGUF file; its
    other messages (a file it cannot read, a missing vocabulary) still show."""
    logger = logging.getLogger(_GGUF_QUANTIZER_LOGGER)
    drop = _DropMessage(GGUF_DTYPE_ADVICE)
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def converted_cache_dir(gguf_path: Path, dtype: torch.dtype) -> Path:
    """Where the dequantized copy of a GGUF file is kept: dequantizing takes a minute, loading seconds."""
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return cache_dir() / "converted" / f"{gguf_path.stem}-{str(dtype).removeprefix('torch.')}-{key}"


def save_converted(model: torch.nn.Module, target: Path) -> None:
    """Save next to the cache atomically (a directory rename); a failure only costs speed next time."""
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    try:
        # The weights are plain tensors once dequantized; drop the GGUF marker that forbids saving them.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(tmp))
        tmp.rename(target)
    except (OSError, ValueError) as exc:
        log.warning("could not cache the dequantized model at %s: %s", target, exc)
        shutil.rmtree(tmp, ignore_errors=True)


class TorchBackend(BackendBase):
    """A transformers causal LM with a ``DynamicCache`` for one sequence."""

    name = "torch"
    can_restrict_vocab = True

    def __init__(
        self, model: torch.nn.Module, device: str = "cpu", max_length: int | None = None, pad_head_rows: bool = False
    ) -> None:
        from transformers import DynamicCache

        self.model = model.eval()
        self.device = device
        self.config = model.config
        self._cache_cls = DynamicCache
        self._cache = DynamicCache(config=self.config)
        self._length = 0
        self._max_length = max_length or int(getattr(self.config, "max_position_embeddings", 32768))
        # transformers 5 renamed the cache argument; keep working on both sides of the rename.
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.dtype = next(model.parameters()).dtype
        self._decoder = model.get_decoder()
        self._head = model.get_output_embeddings()
        if getattr(self._head, "bias", None) is not None:
            raise ModelError("models whose output head has a bias are not supported by the torch backend")
        self._head_weight: torch.Tensor | None = None
        self._pad_head_rows = pad_head_rows  # score a single row as two, like the padded linear layers
        self._vocab_size = int(self._head.weight.shape[0])

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        gguf_file: str | None = None,
        dtype: str | torch.dtype | None = "auto",
        device: str = "cpu",
        quantize: str | None = None,
        pad_single_row: bool | None = None,
        batch_invariant: bool = True,
    ) -> TorchBackend:
        """Load an HF model directory, or a GGUF file (``path`` = its directory, ``gguf_file`` = its name).

        ``pad_single_row``: compute one-token steps as two rows when that is faster here (measured when
        ``None``); see :func:`single_row_matmul_is_slow`. ``batch_invariant``: make a row's logits the same
        whether it is evaluated alone or inside a verification (row-wise attention, and one-row matmuls
        computed as two rows), so that speculative greedy output equals target-only greedy output exactly.
        """
        from safetensors import SafetensorError  # a truncated or corrupt weights file
        from transformers import AutoModelForCausalLM

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendUnavailable("CUDA was requested but torch sees no CUDA device",
                                     "use --device cpu, or install a CUDA build of torch")
        if dtype == "int8":
            quantize = "int8"
        torch_dtype = resolve_dtype(dtype, device)
        if quantize == "int8":
            torch_dtype = torch.bfloat16
        kwargs: dict = {"dtype": torch_dtype}
        converted = None
        if gguf_file:
            converted = converted_cache_dir(Path(path) / gguf_file, torch_dtype)
            if (converted / "config.json").exists():
                path, gguf_file = converted, None
            else:
                kwargs["gguf_file"] = gguf_file
        try:
            with without_gguf_dtype_advice():
                model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
            if gguf_file and converted is not None:
                save_converted(model, converted)
        except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
            where = Path(path) / gguf_file if gguf_file else Path(path)
            raise ModelError(f"could not load model {where}: {str(exc).splitlines()[0]}",
                             "check the file, or run `codecue models verify` / `codecue models pull --force`") from exc
        if quantize == "int8":
            if device != "cpu":
                raise ValueError("int8 weight-only quantization is for the CPU path")
            quantize_int8_(model)
        elif quantize not in (None, "none"):
            raise ValueError(f"unknown quantization {quantize!r}; choose int8 or none")
        model.to(device)
        if device == "cpu" and quantize != "int8":
            if pad_single_row is None:
                pad_single_row = single_row_matmul_is_slow(torch_dtype)
            if batch_invariant and torch_dtype == torch.bfloat16:
                # A one-row bf16 matmul takes another kernel (a matrix-vector product) than a multi-row one,
                # with another summation order; two rows take the same kernel as a verification, and any
                # row count from two up gives bit-identical rows (measured). fp32 matmuls differ by row
                # count anyway, so there the probe alone decides.
                pad_single_row = True
            if pad_single_row:
                pad_single_rows_(model)
        if batch_invariant:
            use_rowwise_attention_(model)
        return cls(model, device=device, pad_head_rows=bool(pad_single_row))

    @property
    def vocab_size(self) -> int:
        """The full vocabulary, also while :meth:`restrict_vocab` is in force."""
        return self._vocab_size

    @property
    def length(self) -> int:
        return self._length

    @property
    def max_length(self) -> int:
        return self._max_length

    def _forward(self, token_ids: list[int], n_logits: int) -> torch.Tensor:
        n = n_logits
        ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            # Run the decoder, then the output head on only the rows asked for (the head is the
            # biggest single matmul of a small model, and prefill rarely needs more than one row).
            out = self._decoder(input_ids=ids, use_cache=True, **{self._cache_kwarg: self._cache})
            self._length += len(token_ids)
            if n == 0:
                return torch.empty(0, self.vocab_size)
            hidden = out.last_hidden_state[0, -n:]
            head = self._head_weight if self._head_weight is not None else self._head.weight
            if n == 1 and self._pad_head_rows:
                logits = torch.nn.functional.linear(torch.cat([hidden, hidden]), head)[:1]
            else:
                logits = torch.nn.functional.linear(hidden, head)
        return logits.float().cpu()

    def restrict_vocab(self, token_ids: Sequence[int] | None) -> None:
        """Score only ``token_ids`` (in that order) from now on; ``None`` restores the full vocabulary.

        For a draft model: its guesses are verified against the target's full vocabulary, so output
        stays exact, while a head over the tokens code uses is several times cheaper than the full one.
        """
        if token_ids is None:
            self._head_weight = None
            return
        index = torch.tensor(list(token_ids), dtype=torch.long, device=self._head.weight.device)
        self._head_weight = self._head.weight.index_select(0, index).contiguous()

    def truncate(self, length: int) -> None:
        if length < 0:
            raise ValueError("length must be >= 0")
        if length < self._length:
            if length == 0:
                self.reset()
                return
            # Negative crop = "remove this many": the meaning both transformers 4.x and 5.x agree on.
            self._cache.crop(-(self._length - length))
            self._length = length

    def reset(self) -> None:
        self._cache = self._cache_cls(config=self.config)
        self._length = 0

