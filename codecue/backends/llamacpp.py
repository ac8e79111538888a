"""The llama.cpp backend: GGUF models as they are (quantized) on the CPU, through llama-cpp-python.

It drives llama.cpp's C API through llama-cpp-python's ctypes bindings (``llama_cpp.llama_cpp``), not the
high-level ``Llama`` generator: the engine needs logits for every position of ``[last] + draft`` from one
``llama_decode`` call and a rollback that is a length, which the generator does not offer. One context holds
one sequence (seq id 0); rollback removes the KV cells past the kept length with ``llama_memory_seq_rm``.
Chunk reuse (``hold_chunks``/``place_chunk``) parks cached chunks in a second sequence (:data:`HELD`) while
the tokens before them are evaluated, with their positions already shifted (``llama_memory_seq_add``), and
moves each back into sequence 0 when the sequence reaches it: llama.cpp evaluates a sequence's new tokens
only right after its last position, so a chunk cannot wait in sequence 0 behind tokens not yet evaluated.
A refresh (``set_aside``/``restore_aside``) keeps the old entries in that sequence, unmoved, while sequence 0
evaluates the same positions again.

llama-cpp-python is an optional dependency (``pip install 'codecue[llamacpp]'``) that compiles llama.cpp
when installed from source; it is imported lazily, and a missing or broken install raises
:class:`codecue.errors.BackendUnavailable` so the caller can fall back to the torch backend.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from codecue.backends.base import BackendBase, Chunk, Interrupted
from codecue.backends.kv_cache import MIN_CALL
from codecue.errors import BackendUnavailable, ModelError

INSTALL_HINT = "install it with: pip install 'codecue[llamacpp]'"

_GGML_LOG_LEVEL_ERROR = 4  # ggml_log_level: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
_GGML_LOG_LEVEL_CONT = 5

#: The sequence that holds chunks aside during a shifted reuse (sequence 0 is the one the engine sees).
HELD = 1

_init_lock = threading.Lock()
_lib: ModuleType | None = None
_log_callback: Any = None  # kept referenced: llama.cpp holds a raw pointer to it
_last_log_level = 0
# Calls llama.cpp is stopping because an interruptible check asked it to: it logs a stop as an error (a
# failed graph, a failed decode), which it is not.
_stopping = 0
_stopping_lock = threading.Lock()


def _load_lib() -> ModuleType:
    """Import llama-cpp-python's C bindings once, initialise llama.cpp and silence its logging."""
    global _lib, _log_callback
    with _init_lock:
        if _lib is not None:
            return _lib
        from codecue.backends.cpu_class import ENV as CPU_CLASS_ENV
        from codecue.backends.cpu_class import cpu_class, library_path

        directory = library_path()  # the CPU class's build (None: the installed package's own)
        if directory is not None:
            for variable in ("LLAMA_CPP_LIB_PATH", "MTMD_CPP_LIB", "LLAVA_CPP_LIB"):
                os.environ[variable] = directory
        try:
            import llama_cpp.llama_cpp as lib
        except ImportError as e:
            raise BackendUnavailable(f"the llama.cpp backend needs llama-cpp-python ({e})", INSTALL_HINT) from e
        except (OSError, RuntimeError) as e:  # the package is there but its shared library does not load
            raise BackendUnavailable(f"llama-cpp-python is installed but does not load: {e}", INSTALL_HINT) from e
        loaded = getattr(getattr(lib, "_lib", None), "_name", None)  # the library the import loaded
        if directory is not None and loaded and Path(loaded).resolve().parent != Path(directory).resolve():
            # imported before the class was chosen: serving it would measure and check the wrong build
            raise BackendUnavailable(f"llama.cpp was loaded from {loaded} before the {cpu_class()} class was "
                                     "chosen", f"set {CPU_CLASS_ENV}={cpu_class()} before starting codecue")
        required = ("llama_model_load_from_file", "llama_init_from_model", "llama_get_memory", "llama_memory_seq_rm")
        missing = [name for name in required if not hasattr(lib, name)]
        if missing:
            raise BackendUnavailable(
                f"llama-cpp-python is too old for the llama.cpp backend (missing {', '.join(missing)})",
                "upgrade it with: pip install -U 'codecue[llamacpp]'",
            )

        @lib.llama_log_callback
        def log_errors_only(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            # llama.cpp logs every tensor and setting at load time; keep only errors (and their
            # continuation lines) so a daemon's stderr stays readable.
            global _last_log_level
            if level != _GGML_LOG_LEVEL_CONT:
                _last_log_level = level
            if _last_log_level == _GGML_LOG_LEVEL_ERROR and text and not _stopping:
                sys.stderr.write(text.decode("utf-8", errors="replace"))

        _log_callback = log_errors_only
        lib.llama_log_set(_log_callback, ctypes.c_void_p(0))
        lib.llama_backend_init()
        _lib = lib
        return lib


def physical_core_count() -> int:
    """Physical cores this process may run on: llama.cpp is slower with a thread per hyperthread.

    Counts distinct (physical id, core id) pairs among the CPUs in this process's affinity mask, from
    /proc/cpuinfo; elsewhere falls back to the logical count halved when it looks hyperthreaded.
    """
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = set(range(os.cpu_count() or 1))
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    cores: set[tuple[str, str]] = set()
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "processor" not in fields or "core id" not in fields:
            continue
        if int(fields["processor"]) in allowed:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    if cores:
        return max(1, len(cores))
    logical = len(allowed)
    return max(1, logical // 2 if logical >= 4 else logical)


def attention_shape(lib: ModuleType, model: Any) -> str:
    """What decides a loaded model's attention kernels' speed: its layer count and head layout, from the
    metadata llama.cpp read with it."""
    buf = ctypes.create_string_buffer(256)

    def value(key: str) -> str | None:
        n = lib.llama_model_meta_val_str(model, key.encode("utf-8"), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace") if n >= 0 else None

    arch = value("general.architecture") or ""
    keys = [f"{arch}.{k}" for k in ("block_count", "embedding_length", "attention.head_count",
                                    "attention.head_count_kv", "attention.key_length")]
    return " ".join(f"{k}={value(k)}" for k in keys)


@dataclass(frozen=True, eq=False)
class SavedState:
    """Sequence 0's entries as llama.cpp writes them (:meth:`LlamaCppBackend.save_state`), and its length."""

    length: int
    data: np.ndarray  # bytes


def _bytes_pointer(data: np.ndarray) -> Any:
    return data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))


class LlamaCppBackend(BackendBase):
    """A GGUF model in one llama.cpp context holding one sequence; see :class:`codecue.backends.base.Backend`."""

    name = "llamacpp"

    def __init__(
        self,
        lib: ModuleType,
        model: Any,
        context: Any,
        path: Path,
        n_ctx: int,
        n_batch: int,
        n_threads: int,
        repack: bool = True,
        shift: bool = False,
    ) -> None:
        self._lib = lib
        self._model = model
        self._ctx = context
        self._vocab = lib.llama_model_get_vocab(model)
        self._memory = lib.llama_get_memory(context)
        self.path = path
        self.n_threads = n_threads
        self.n_batch = n_batch
        self._n_ctx = n_ctx
        self._n_vocab = int(lib.llama_vocab_n_tokens(self._vocab))
        self._length = 0
        self._batch = lib.llama_batch_init(n_batch, 0, 1)
        self._closed = False
        self.repack = repack
        # Shifting needs the second sequence and a memory whose positions can move (not recurrent models,
        # nor M-RoPE ones: llama_memory_can_shift).
        self._two_sequences = shift
        self._can_shift = shift and bool(lib.llama_memory_can_shift(self._memory))
        self._held: dict[int, int] = {}  # held chunks: position moved to -> length
        self._aside: tuple[int, int] | None = None  # positions set aside, start and end, in sequence HELD
        self._abort_check: Any = None  # the ctypes callback llama.cpp holds while calls are interruptible
        self._stopped = False  # the check asked llama.cpp to stop the call under way
        self._stop_error: BaseException | None = None  # ... because the check itself failed
        # A move (llama_memory_seq_add) that llama.cpp applies at the start of the next decode.
        self._shift_pending = False
        # An aborted call is dropped whole only where the memory can drop a range of positions.
        self._interruptible = not (lib.llama_model_is_recurrent(model) or lib.llama_model_is_hybrid(model))

    @classmethod
    def load(
        cls,
        path: str | Path,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        flash_attn: bool | None | Callable[[str], bool | None] = None,
        repack: bool = True,
        shift: bool = True,
    ) -> LlamaCppBackend:
        """Load a GGUF file as it is (quantized weights stay quantized) into a context of ``n_ctx`` tokens.

        ``n_batch`` is the most tokens one ``llama_decode`` call takes; it must cover the largest verify
        chunk and should match the engine's prefill chunk (longer inputs are split). ``flash_attn``:
        ``None`` lets llama.cpp decide (its default), ``True``/``False`` force it on or off, a function decides from
        the model's :func:`attention_shape` once the weights are loaded.

        ``repack`` lets llama.cpp re-lay quantized weights for its faster CPU kernels (its default). It
        changes numerics. On the default Q4_K_M target (an AVX-512 build): with it, a call of 4+ tokens
        (a verify with K >= 3) runs other matmul kernels than a one-token step; without it, up to 7 tokens
        (K <= 6) evaluate bit-identically to one-token steps, at a slower decode (but faster prefill;
        docs/experiments.md, verification numerics). In both layouts, past 256 cached positions any
        multi-token call takes another attention path than a one-token step. Either difference can flip a
        near-tie argmax. Both sides of an identity check must use the same setting: even one-token logits
        differ between the two layouts.

        ``shift`` gives the context a second sequence to hold chunks in (one unified KV buffer, so holding
        a chunk is bookkeeping, not a copy), which chunk reuse and a refresh need; ``can_shift`` also asks
        the model.
        One sequence's decoding is the same either way (a test checks the logits bit for bit).
        """
        lib = _load_lib()
        path = Path(path).expanduser()
        if not path.is_file():
            raise ModelError(f"model file not found: {path}", "run `codecue models pull` or pass an existing GGUF")
        if n_ctx < 1 or n_batch < 1:
            raise ValueError(f"n_ctx and n_batch must be positive, got {n_ctx} and {n_batch}")
        n_threads = n_threads or physical_core_count()

        model_params = lib.llama_model_default_params()
        model_params.n_gpu_layers = 0  # this is the CPU path; CUDA machines use exllamav2 or torch
        model_params.use_extra_bufts = repack
        model = lib.llama_model_load_from_file(str(path).encode("utf-8"), model_params)
        if not model:
            raise ModelError(f"llama.cpp could not load {path}", "the file may be truncated or not a GGUF model")

        if callable(flash_attn):
            try:
                flash_attn = flash_attn(attention_shape(lib, model))
            except BaseException:
                lib.llama_model_free(model)
                raise
        n_ctx_train = int(lib.llama_model_n_ctx_train(model))
        n_ctx = min(n_ctx, n_ctx_train) if n_ctx_train > 0 else n_ctx
        n_batch = min(n_batch, n_ctx)
        context_params = lib.llama_context_default_params()
        context_params.n_ctx = n_ctx
        context_params.n_batch = n_batch
        # One physical batch per logical one: a verify of K+1 tokens is a single graph evaluation.
        context_params.n_ubatch = n_batch
        context_params.n_seq_max = 2 if shift else 1
        context_params.kv_unified = True  # one buffer for both sequences: a chunk moves between them in place
        context_params.n_threads = n_threads
        context_params.n_threads_batch = n_threads
        context_params.no_perf = True
        if flash_attn is not None:
            context_params.flash_attn_type = (
                lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
        context = lib.llama_init_from_model(model, context_params)
        if not context:
            lib.llama_model_free(model)
            raise ModelError(f"llama.cpp could not create a context of {n_ctx} tokens for {path}")
        return cls(lib, model, context, path, int(lib.llama_n_ctx(context)), n_batch, n_threads, repack, shift)

    # -- the Backend protocol -------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._n_vocab

    @property
    def length(self) -> int:
        return self._length

    @property
    def max_length(self) -> int:
        return self._n_ctx

    @property
    def can_shift(self) -> bool:
        return self._can_shift

    def _forward(self, tokens: list[int], n_logits: int) -> np.ndarray:
        """Evaluate ``tokens`` in chunks of ``n_batch``; llama.cpp skips the output head for the positions
        before the last ``n_logits``, a sizeable part of a prefill with a 152k vocabulary."""
        self._check_open()
        n = len(tokens)
        if self._held and self._length + n > min(self._held):
            raise ValueError(f"{n} tokens at {self._length} would cover the held chunk at {min(self._held)}")
        out = np.empty((n_logits, self._n_vocab), dtype=np.float32)
        first_output = n - n_logits
        length = self._length
        bounds = [*range(0, n, self.n_batch), n]
        if self._applies_move_unchecked and bounds[1] >= 2 * MIN_CALL:
            # The call that applies a move runs without the check (see _decode): a short one, but of a
            # batch's kernels (kv_cache.MIN_CALL), so that the cache is the same to the last bit.
            bounds.insert(1, MIN_CALL)
        try:
            for start, end in zip(bounds, bounds[1:], strict=False):
                chunk = tokens[start:end]
                chunk_first_output = max(0, first_output - start)
                rows = self._decode(chunk, chunk_first_output)
                if rows is not None:  # rows for this chunk's positions chunk_first_output.. of it
                    row0 = start + chunk_first_output - first_output
                    out[row0 : row0 + rows.shape[0]] = rows
        except Interrupted:  # the chunks before the stopped one go too; what is held and set aside stays
            if self._length > length:
                if self._lib.llama_memory_seq_rm(self._memory, 0, length, -1):
                    self._length = length
                else:
                    self.reset()  # never keep a state that is unsure
            raise
        return out

    def truncate(self, length: int) -> None:
        self._check_open()
        if length < 0:
            raise ValueError(f"length must be >= 0, got {length}")
        self._drop_held()
        if length >= self._length:
            return
        if not self._lib.llama_memory_seq_rm(self._memory, 0, length, -1):
            # Only recurrent models refuse a partial removal; start over rather than keep a wrong state.
            self.reset()
            return
        self._length = length

    def reset(self) -> None:
        self._check_open()
        self._lib.llama_memory_clear(self._memory, False)  # metadata only: cells are overwritten on reuse
        self._length = 0
        self._shift_pending = False
        self._held = {}
        self._aside = None

    def hold_chunks(self, keep: int, chunks: Sequence[Chunk]) -> None:
        """Keep positions ``0..keep``, set ``chunks`` aside in sequence :data:`HELD` at their new
        positions, drop the rest of sequence 0 (see :class:`codecue.backends.base.Backend`).

        The new positions take effect by ``llama_memory_seq_add``: llama.cpp re-rotates the keys of the
        moved cells by their shift (RoPE) before the next decode, in one pass over the cache."""
        self._check_open()
        if not self._can_shift:
            raise NotImplementedError("this llama.cpp context cannot shift positions")
        if not 0 <= keep <= self._length:
            raise ValueError(f"keep must be in 0..{self._length}, got {keep}")
        cached_end = moved_end = keep
        for chunk in chunks:
            if (chunk.length < 1 or chunk.cached_at < cached_end or chunk.moved_to < moved_end
                    or chunk.cached_at + chunk.length > self._length):
                raise ValueError(f"chunks must be in order, after {keep} and within {self._length}: {chunks}")
            cached_end, moved_end = chunk.cached_at + chunk.length, chunk.moved_to + chunk.length
        lib, memory = self._lib, self._memory
        self._drop_held()
        for chunk in chunks:  # the same cells, now in both sequences (unified buffer: no copy)
            lib.llama_memory_seq_cp(memory, 0, HELD, chunk.cached_at, chunk.cached_at + chunk.length)
        if not lib.llama_memory_seq_rm(memory, 0, keep, -1):
            self.reset()  # a memory that can shift removes any range; never keep a state that is unsure
            return
        self._length = keep
        # First past every position in use, then each to its place: a chunk never lands on another one
        # that has not moved yet (seq_add moves every held cell in the range it is given). Only the net
        # shift is applied to the keys.
        away = self._n_ctx
        lib.llama_memory_seq_add(memory, HELD, -1, -1, away)
        self._shift_pending = True
        for chunk in chunks:
            start = chunk.cached_at + away
            lib.llama_memory_seq_add(memory, HELD, start, start + chunk.length, chunk.moved_to - start)
        self._held = {chunk.moved_to: chunk.length for chunk in chunks}

    def place_chunk(self, length: int, held_at: int | None = None) -> None:
        """Move the held chunk at ``held_at`` (default: the current length) into sequence 0 at the current
        length (see ``hold_chunks``)."""
        self._check_open()
        start = self._length
        held_at = start if held_at is None else held_at
        if held_at < start or self._held.get(held_at) != length:
            raise ValueError(f"no held chunk of {length} tokens at {held_at} >= {start} (held: {self._held})")
        if held_at != start:  # down into the gap before it: no other held cell lies in between
            self._lib.llama_memory_seq_add(self._memory, HELD, held_at, held_at + length, start - held_at)
            self._shift_pending = True
        self._lib.llama_memory_seq_cp(self._memory, HELD, 0, start, start + length)
        self._lib.llama_memory_seq_rm(self._memory, HELD, start, start + length)
        del self._held[held_at]
        self._length = start + length

    @property
    def can_set_aside(self) -> bool:
        return self._two_sequences

    def set_aside(self, start: int) -> None:
        """Keep positions ``start..`` in sequence :data:`HELD` as they are and drop them from sequence 0
        (see :class:`codecue.backends.base.Backend`): the same cells, now in the held sequence only, so the
        KV buffer needs room for the positions evaluated again beside them."""
        self._check_open()
        if not self._two_sequences:
            raise NotImplementedError("this llama.cpp context has no second sequence")
        if not 0 <= start <= self._length:
            raise ValueError(f"start must be in 0..{self._length}, got {start}")
        lib, memory = self._lib, self._memory
        self._drop_held()
        lib.llama_memory_seq_cp(memory, 0, HELD, start, self._length)
        if not lib.llama_memory_seq_rm(memory, 0, start, -1):
            self.reset()
            return
        self._aside = (start, self._length)
        self._length = start

    def restore_aside(self) -> None:
        """Put back into sequence 0 the positions set aside that it has not reached again, then drop the
        held sequence; nothing where nothing is set aside."""
        self._check_open()
        if self._aside is None:
            return
        _, end = self._aside
        start = self._length
        if start < end:
            self._lib.llama_memory_seq_cp(self._memory, HELD, 0, start, end)
            self._length = end
        self._drop_held()

    @property
    def _applies_move_unchecked(self) -> bool:
        """Whether the next call, made where calls stop part-way, applies a pending move: it runs unchecked
        (see :meth:`_decode`)."""
        return self._abort_check is not None and self._shift_pending

    @property
    def can_interrupt(self) -> bool:
        """Not for recurrent or hybrid models, whose memory cannot drop a stopped call's positions."""
        return self._interruptible

    @contextmanager
    def interruptible(self, stop: Callable[[], bool]) -> Iterator[None]:
        """Calls made within stop part-way once ``stop()`` is true (see :class:`codecue.backends.base.Backend`):
        llama.cpp asks its abort callback after each operation of the graph, the longest a matmul (~20 ms
        for a 512-token call of the default target on 2 cores), and drops the stopped call's positions. A
        ``stop`` that raises stops the call, and the call raises its exception. Nothing changes where calls
        cannot stop part-way (:attr:`can_interrupt`)."""
        self._check_open()
        if not self._interruptible:
            yield
            return

        def check(_data: ctypes.c_void_p) -> bool:
            global _stopping
            if self._stopped:
                return True
            try:
                stopped = bool(stop())
            except BaseException as exc:  # noqa: BLE001 - raised again by the call, once llama.cpp returns
                self._stop_error, stopped = exc, True
            if stopped:
                self._stopped = True
                with _stopping_lock:
                    _stopping += 1
            return stopped

        self._abort_check = self._lib.ggml_abort_callback(check)
        self._lib.llama_set_abort_callback(self._ctx, self._abort_check, None)
        try:
            yield
        finally:
            if not self._closed:
                self._lib.llama_set_abort_callback(self._ctx, self._lib.ggml_abort_callback(), None)
            self._abort_check = None

    @property
    def can_save(self) -> bool:
        return True

    def save_state(self) -> SavedState | None:
        """Sequence 0's entries, copied to host memory (``llama_state_seq_get_data``); None while a move is
        pending: llama.cpp rotates the moved keys at the next call, and a copy taken before would keep them
        unrotated at their new positions."""
        self._check_open()
        if self._shift_pending:
            return None
        lib = self._lib
        size = int(lib.llama_state_seq_get_size(self._ctx, 0))
        if size == 0:
            return None
        data = np.empty(size, dtype=np.uint8)  # not zeroed first: llama.cpp writes every byte
        if int(lib.llama_state_seq_get_data(self._ctx, _bytes_pointer(data), size, 0)) != size:
            return None
        return SavedState(self._length, data)

    def load_state(self, state: object) -> bool:
        """Empty the cache and load ``state`` (``llama_state_seq_set_data``): into the emptied memory its
        cells lie side by side from the first, in the order they lay when it was saved (so positions that
        were evaluated from the first cell on lie as they did)."""
        self._check_open()
        if not isinstance(state, SavedState):
            raise TypeError(f"not a saved llama.cpp state: {type(state).__name__}")
        self.reset()
        size = state.data.size
        if int(self._lib.llama_state_seq_set_data(self._ctx, _bytes_pointer(state.data), size, 0)) != size:
            self.reset()
            return False
        self._length = state.length
        return True

    def _drop_held(self) -> None:
        if self._held or self._aside is not None:
            self._held = {}
            self._aside = None
            self._lib.llama_memory_seq_rm(self._memory, HELD, -1, -1)

    # -- helpers ---------------------------------------------------------------------------------

    def _decode(self, chunk: list[int], first_output: int) -> np.ndarray | None:
        """Evaluate ``chunk`` at the next positions; logits rows for positions ``first_output..`` of it."""
        lib = self._lib
        batch = self._batch
        n = len(chunk)
        pos0 = self._length
        for i, token in enumerate(chunk):
            batch.token[i] = token
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= first_output
        batch.n_tokens = n
        # llama.cpp applies a pending move (the moved keys' rotation) at the start of a decode, under the
        # abort callback too: stopped there, the move would stay pending and be applied again in full by
        # the next decode, rotating the first layers twice. That call runs to its end.
        unchecked = self._applies_move_unchecked
        if unchecked:
            lib.llama_set_abort_callback(self._ctx, lib.ggml_abort_callback(), None)
        try:
            status = lib.llama_decode(self._ctx, batch)
        finally:
            if unchecked:
                lib.llama_set_abort_callback(self._ctx, self._abort_check, None)
            stopped, error, self._stopped, self._stop_error = self._stopped, self._stop_error, False, None
            if stopped:
                global _stopping
                with _stopping_lock:
                    _stopping -= 1
        if status == 0:
            self._shift_pending = False
        if status == 2 and stopped:  # llama.cpp dropped the call's positions
            self._length = pos0
            if error is not None:
                raise error
            raise Interrupted(f"stopped evaluating {n} tokens at {pos0}")
        if status != 0:
            # llama.cpp may have stored part of a multi-ubatch chunk; the caller truncates back.
            self._length = pos0 + n
            reason = {1: "no KV cache slot", 2: "aborted", -1: "invalid input"}.get(status, "error")
            raise RuntimeError(f"llama_decode failed with status {status} ({reason}) on {n} tokens at {pos0}")
        self._length = pos0 + n
        if first_output >= n:
            return None
        rows = np.empty((n - first_output, self._n_vocab), dtype=np.float32)
        for row, i in enumerate(range(first_output, n)):
            pointer = lib.llama_get_logits_ith(self._ctx, i)
            rows[row] = np.ctypeslib.as_array(pointer, shape=(self._n_vocab,))
        return rows

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this llama.cpp backend has been closed")

    def tokenize(self, text: str, parse_special: bool = True) -> list[int]:
        """Token ids of ``text`` by the model's own tokenizer (no BOS added)."""
        self._check_open()
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buffer = (self._lib.llama_token * capacity)()
        n = self._lib.llama_tokenize(self._vocab, data, len(data), buffer, capacity, False, parse_special)
        if n < 0:  # buffer too small: -n is the size needed
            capacity = -n
            buffer = (self._lib.llama_token * capacity)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), buffer, capacity, False, parse_special)
        return list(buffer[:n])

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of one token (special tokens rendered as their text)."""
        self._check_open()
        size = 64
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = self._lib.llama_token_to_piece(self._vocab, int(token_id), buffer, size, 0, True)
            if n >= 0:
                return buffer.raw[:n]
            size = -n

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids``; invalid UTF-8 (a token sequence cut inside a character) is replaced."""
        return b"".join(self.token_bytes(t) for t in token_ids).decode("utf-8", errors="replace")

    @property
    def eos_token_id(self) -> int:
        return int(self._lib.llama_vocab_eos(self._vocab))

    def is_end_of_generation(self, token_id: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self._vocab, int(token_id)))

    @property
    def fim_token_ids(self) -> dict[str, int]:
        """The FIM special tokens' ids (prefix, suffix, middle, pad) from the GGUF; -1 where absent."""
        lib = self._lib
        return {
            "prefix": int(lib.llama_vocab_fim_pre(self._vocab)),
            "suffix": int(lib.llama_vocab_fim_suf(self._vocab)),
            "middle": int(lib.llama_vocab_fim_mid(self._vocab)),
            "pad": int(lib.llama_vocab_fim_pad(self._vocab)),
        }

    def close(self) -> None:
        """Free the context, the batch and the model (the backend is unusable afterwards)."""
        if self._closed:
            return
        self._closed = True
        self._lib.llama_batch_free(self._batch)
        self._lib.llama_free(self._ctx)
        self._lib.llama_model_free(self._model)

    def __enter__(self) -> LlamaCppBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"LlamaCppBackend({str(self.path)!r}, n_ctx={self._n_ctx}, n_threads={self.n_threads})"
