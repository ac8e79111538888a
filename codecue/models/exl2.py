"""Conversion of an HF directory or a GGUF file to an EXL2 model directory (for the exllamav2 backend).

:func:`convert_to_exl2` runs exllamav2's converter (``python -m exllamav2.conversion.convert_exl2``) on an
HF directory, or on a GGUF file after dequantizing it to an HF directory with transformers. The converter
needs a CUDA GPU and exllamav2; that is checked (without importing exllamav2) before any slow work.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from codecue.backends.exllamav2 import missing_gpu_runtime, read_config, rope_theta_missing_from
from codecue.errors import BackendUnavailable, CodeCueError, ModelError
from codecue.models.resolve import ModelSource, resolve_model
from codecue.models.tokenizer import load_tokenizer

log = logging.getLogger(__name__)

HEAD_BITS_CHOICES = (2, 3, 4, 5, 6, 8)  # exllamav2.conversion.qparams.qparams_headoptions


def check_conversion_request(out_dir: Path, bits: float, head_bits: int = 6) -> None:
    """Reject bad options before any slow work."""
    if not 2.0 <= bits <= 8.0:
        raise CodeCueError(f"--bits {bits} is out of range", "choose bits per weight between 2.0 and 8.0, e.g. 4.0")
    if head_bits not in HEAD_BITS_CHOICES:
        raise CodeCueError(f"--head-bits {head_bits} is not supported",
                           f"choose one of {', '.join(map(str, HEAD_BITS_CHOICES))}")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise CodeCueError(f"{out_dir} already exists and is not an empty directory",
                           "choose another --out, or remove it first")


def require_converter() -> None:
    """exllamav2's quantizer runs on a CUDA GPU; say so before dequantizing anything."""
    missing = missing_gpu_runtime()
    if missing:
        raise BackendUnavailable(
            f"converting to EXL2 runs exllamav2's quantizer on a CUDA GPU: {'; '.join(missing)}",
            "run `codecue models convert` on an NVIDIA machine after pip install 'codecue[cuda]' - exllamav2 "
            "compiles its CUDA extension on first use and needs nvcc; on this machine use the GGUF model with "
            "--backend llamacpp or --backend torch")


def dequantize_gguf(gguf_path: Path) -> Path:
    """An HF directory (FP16 weights + tokenizer) for a GGUF file, cached where the torch backend keeps its
    dequantized copies (an existing copy in any dtype is reused)."""
    from transformers import AutoModelForCausalLM

    from codecue.backends.torch_backend import converted_cache_dir, save_converted, without_gguf_dtype_advice

    hf_dir = next((d for d in (converted_cache_dir(gguf_path, dt) for dt in (torch.float16, torch.bfloat16, torch.float32))
                   if (d / "config.json").is_file()), None)
    if hf_dir is None:
        hf_dir = converted_cache_dir(gguf_path, torch.float16)
        log.info("dequantizing %s to %s", gguf_path, hf_dir)
        try:
            with without_gguf_dtype_advice():
                model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                             dtype=torch.float16)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ModelError(f"could not dequantize {gguf_path}: {str(exc).splitlines()[0]}",
                             "check the file with `codecue models verify`, or convert an HF directory instead") from None
        save_converted(model, hf_dir)
        del model
        if not (hf_dir / "config.json").is_file():
            raise ModelError(f"could not write the dequantized model to {hf_dir}",
                             "check free disk space and permissions of the cache directory (CODECUE_CACHE_DIR)")
    if not (hf_dir / "tokenizer.json").is_file():
        # The converter tokenizes its calibration text, so the directory needs the tokenizer too.
        tokenizer = load_tokenizer(ModelSource("gguf", gguf_path, gguf_path.stem), fast=False)  # saved below
        tmp = hf_dir / f".tokenizer.tmp{os.getpid()}"
        tokenizer.save_pretrained(str(tmp))
        for item in tmp.iterdir():
            os.replace(item, hf_dir / item.name)
        tmp.rmdir()
    return hf_dir


def converter_input(hf_dir: Path, work: Path) -> Path:
    """The directory to give the converter: ``hf_dir`` itself, or, when its config.json needs the fix of
    :func:`rope_theta_missing_from`, a view of it in ``work`` (links to its files, a fixed config.json) —
    the user's directory is never modified, and the converter copies the fixed config into the output."""
    config = read_config(hf_dir)
    rope_theta = rope_theta_missing_from(config)
    if rope_theta is None:
        return hf_dir
    view = work / "input"
    shutil.rmtree(view, ignore_errors=True)
    view.mkdir(parents=True)
    for item in hf_dir.iterdir():
        if item.name != "config.json" and not item.name.startswith("."):
            (view / item.name).symlink_to(item.resolve())
    (view / "config.json").write_text(json.dumps({**config, "rope_theta": rope_theta}, indent=2), encoding="utf-8")
    return view


def converter_command(hf_dir: Path, work_dir: Path, out_dir: Path, bits: float, head_bits: int) -> list[str]:
    """exllamav2's converter (the module behind its ``convert.py``): measure, quantize, and compile a full
    model directory (weights + config + tokenizer) into ``out_dir``; ``work_dir`` makes it resumable."""
    return [sys.executable, "-m", "exllamav2.conversion.convert_exl2", "-i", str(hf_dir), "-o", str(work_dir),
            "-cf", str(out_dir), "-b", f"{bits:g}", "-hb", str(head_bits)]


def _run_converter(command: list[str]) -> int:
    return subprocess.run(command, check=False).returncode


def convert_to_exl2(source: ModelSource, out_dir: str | Path, *, bits: float = 4.0, head_bits: int = 6,
                    work_dir: str | Path | None = None,
                    run_converter: Callable[[list[str]], int] = _run_converter) -> Path:
    """Quantize an HF directory or GGUF file to an EXL2 directory at ``out_dir`` (written under a temporary
    name and renamed when complete). The converter's working directory is kept when it fails, so running
    the same command again resumes."""
    out_dir = Path(out_dir).absolute()
    check_conversion_request(out_dir, bits, head_bits)
    if source.kind == "exl2":
        raise CodeCueError(f"{source.path} is already an EXL2 model", "load it with --backend exllamav2")
    require_converter()
    hf_dir = dequantize_gguf(source.path) if source.kind == "gguf" else source.path
    work = Path(work_dir).absolute() if work_dir else out_dir.with_name(f".{out_dir.name}.exl2-work")
    tmp_out = out_dir.with_name(f".{out_dir.name}.tmp{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    hf_dir = converter_input(hf_dir, work)
    shutil.rmtree(tmp_out, ignore_errors=True)
    command = converter_command(hf_dir, work, tmp_out, bits, head_bits)
    log.info("running %s", " ".join(command))
    returncode = run_converter(command)
    if returncode != 0:
        shutil.rmtree(tmp_out, ignore_errors=True)
        raise ModelError(f"exllamav2's converter failed (exit status {returncode}) converting {hf_dir}",
                         f"see its output above; running the same command again resumes from {work}")
    try:
        converted = resolve_model(str(tmp_out), "target")
    except ModelError as exc:
        raise ModelError(f"exllamav2's converter finished but left no usable model: {exc.message}",
                         f"see its output above; remove {work} to start over") from None
    if converted.kind != "exl2":
        raise ModelError(f"exllamav2's converter wrote {tmp_out} but it is not an EXL2 model",
                         f"see its output above; remove {work} to start over")
    if out_dir.is_dir():
        out_dir.rmdir()  # empty (checked above)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_out.rename(out_dir)
    shutil.rmtree(work, ignore_errors=True)
    return out_dir
