"""What ``codecue bench`` prints and writes: the tables and the plot of every subcommand, and the raw JSON
report (``--json FILE``) with its ``meta`` record: what ran, on which CPU and build, from which commit.

A report names no absolute path of the machine it ran on: model files by file name, corpus files relative
to the corpus (:func:`report_path`), and in the command an absolute path typed is cut to its file name.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType, LlamaFileType

from codecue import __version__
from codecue.backends.cpu_class import cpu_class, llamacpp_build
from codecue.backends.native_check import cpu_description, cpu_signature
from codecue.loading.load import plan_config
from codecue.loading.resolve import resolve_config
from codecue.models.config import CompletionConfig
from codecue.models.gguf_reader import GGUFTensorInfo, read_gguf_header
from codecue.paths import atomic_write_text
from codecue.tables import markdown_table
from codecue_bench.peers import PEERS, PLAIN_PEER
from codecue_bench.points import CORPUS_DIR
from codecue_bench.runner import RunRecord, Summary

#: CPU flags that decide which kernels llama.cpp and torch run
KERNEL_FLAG_PREFIXES = ("avx", "amx", "f16c", "fma", "bmi2")
#: the checkout CodeCue runs from, when it runs from one (benchmarks/codecue_bench/report.py -> the repository root)
SOURCE_ROOT = Path(__file__).resolve().parents[2]


# -- the raw report -----------------------------------------------------------------------------------


def report_meta(kind: str, argv: Sequence[str], models: Mapping[str, str | Path | None]) -> dict[str, Any]:
    """The ``meta`` record of a raw report: ``kind`` (the subcommand), the CPU (:func:`cpu_description`), its
    kernel-picking flags, the CPU class and llama.cpp build that serve, the command as typed (``argv``: what
    followed ``codecue bench``), the source commit, the UTC date, and the model files the run served, by role
    (``models``: ``{"target": path, ...}``; a role without a file is left out), each named by
    :func:`served_model`."""
    flags = cpu_signature().partition(" | ")[2]
    return {
        "kind": kind,
        "cpu": cpu_description(),
        "cpu_flags": sorted(flag for flag in flags.split() if flag.startswith(KERNEL_FLAG_PREFIXES)),
        "cpu_class": cpu_class(),
        "llama_cpp": llamacpp_build(),
        "command": " ".join(["codecue", "bench", *(_without_machine_path(arg) for arg in argv)]),
        "commit": source_commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "models": {role: served_model(path) for role, path in models.items() if path is not None},
    }


def served_model(path: str | Path) -> dict[str, Any]:
    """How a report names a model file it served: the file name, its size, the weight layout it declares (a
    GGUF file's ``general.file_type``, e.g. ``Q4_K_M``; ``hf`` for a model directory) and, for a GGUF file,
    the tensor types that hold its bytes (``tensor_types``: a file may declare one layout and hold another's
    tensors, as the default draft, named Q5_0, declares Q4_K_M)."""
    path = Path(path)
    if path.is_dir():
        return {"file": path.name, "bytes": None, "layout": "hf"}
    header = read_gguf_header(path)
    return {"file": path.name, "bytes": path.stat().st_size, "layout": gguf_layout(header.metadata),
            "tensor_types": tensor_types(header.tensors)}


def gguf_layout(metadata: Mapping[str, Any]) -> str:
    """The weight layout a GGUF file declares (``general.file_type``), or ``unknown``."""
    try:
        return LlamaFileType(int(metadata.get("general.file_type"))).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        return "unknown"


def tensor_types(tensors: Sequence[GGUFTensorInfo]) -> str:
    """The tensor types holding a GGUF file's weights, by their share of its bytes (those of 1 % or more):
    ``Q5_0 73 %, Q8_0 24 %, ...``."""
    held: dict[str, int] = {}
    for tensor in tensors:
        try:
            name = GGMLQuantizationType(tensor.ggml_type).name
        except ValueError:
            name = f"type {tensor.ggml_type}"
        held[name] = held.get(name, 0) + tensor.n_bytes
    total = sum(held.values()) or 1
    return ", ".join(f"{name} {100 * size / total:.0f} %" for name, size in sorted(held.items(), key=lambda kv: -kv[1])
                     if size >= total / 100)


def planned_models(config: CompletionConfig, *, peer: bool = False) -> dict[str, str | Path | None]:
    """The model files the runtime plan serves ``config`` with on this machine (what a server started with it
    loads), by role; with ``peer``, also the shipped target that llama-server serves as the peer."""
    spec = plan_config(config)
    target, draft = spec.names
    models: dict[str, str | Path | None] = {"target": target, "draft": None if spec.target_only else draft}
    if peer:
        models["peer target"] = shipped_target(config)
    return models


def shipped_target(config: CompletionConfig) -> Path:
    """The configured target file as shipped (the peers serve it as it is)."""
    return resolve_config(config, with_draft=False).target.path


def _without_machine_path(arg: str) -> str:
    """``arg`` with an absolute path cut to its file name (``/data/x.gguf`` and ``--json=/tmp/r.json`` too)."""
    flag, equals, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    if not equals and flag:
        return arg
    return f"{flag}{equals}{Path(value).name}" if os.path.isabs(value) else arg


def source_commit() -> str:
    """The commit CodeCue runs from: the short hash, ``-dirty`` when tracked files differ from it or code
    files are not tracked yet (other untracked files do not count: a report written into the checkout would
    make every later run "dirty"); the package
    version where CodeCue does not run from a git checkout."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != SOURCE_ROOT:
            return __version__  # installed inside some other repository
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
        # a new module not committed yet changes what runs, a report written into docs/bench does not
        changed += git("ls-files", "--others", "--exclude-standard", "--", "codecue", "benchmarks/codecue_bench")
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{commit}-dirty" if changed else commit


def report_path(path: str | Path) -> str:
    """How a report names a file: relative to the corpus for a corpus file, else by its name (as given: a
    cached model may be a link to a file named by its hash)."""
    resolved, corpus = Path(path).resolve(), CORPUS_DIR.resolve()
    return resolved.relative_to(corpus).as_posix() if resolved.is_relative_to(corpus) else Path(path).name


def write_report(path: Path | None, meta: dict[str, Any], data: dict[str, Any]) -> None:
    """Write ``{"meta": meta, **data}`` to ``path`` (atomically: a reader never sees half a report)."""
    if path is None:
        return
    if "meta" in data:
        raise ValueError("a report's data must not have its own 'meta' key")
    atomic_write_text(path, json.dumps({"meta": meta, **data}, indent=1))


# -- speed: CodeCue's methods and the peers -----------------------------------------------------------


def format_speed_table(summaries: list[Summary], methods: list[str]) -> str:
    rows = [("method", "language", "points", "identical", "accept", "tok/round", "TTFT ms", "TPOT ms", "speedup")]
    order = {m: i for i, m in enumerate(methods)}
    for s in sorted(summaries, key=lambda s: (s.language == "all", s.language, order.get(s.method, 99))):
        rows.append((s.method, s.language, str(s.points), f"{s.identical}/{s.points}",
                     "-" if s.acceptance_rate is None else f"{s.acceptance_rate:.2f}",
                     "-" if s.tokens_per_round is None else f"{s.tokens_per_round:.2f}",
                     f"{s.median_ttft_ms:.0f}", f"{s.median_tpot_ms:.1f}",
                     "-" if s.median_speedup is None else f"{s.median_speedup:.2f}x"))
    return markdown_table(rows)


def peer_legend(labels: Sequence[str]) -> list[str]:
    """One line per peer in the run: what it is (a backend prefix, ``torch:hf-assisted``, is dropped)."""
    names = dict.fromkeys(label.rsplit(":", 1)[-1] for label in labels)
    return [f"{name}: {PEERS[name].description}" for name in names if name in PEERS]


def peer_ratio_lines(records: list[RunRecord], labels: list[str]) -> list[str]:
    """Median over points of the plain llama-cpp-python decode's time per token / each CodeCue method's
    (> 1: CodeCue is faster)."""
    plain = {r.point: r.tpot_ms for r in records if r.method == PLAIN_PEER and r.tpot_ms > 0}
    if not plain:
        return []
    lines = []
    for label in labels:
        if label in PEERS and not PEERS[label].every_backend:
            continue
        ratios = [plain[r.point] / r.tpot_ms for r in records if r.method == label and r.point in plain and r.tpot_ms > 0]
        if ratios:
            lines.append(f"{label} vs {PLAIN_PEER}: median time-per-token ratio {statistics.median(ratios):.3f} "
                         f"over {len(ratios)} points (> 1: faster)")
    return lines


def server_ratio_lines(records: list[RunRecord], labels: list[str]) -> list[str]:
    """Per point, the fastest llama-server configuration's time per token / each CodeCue method's, median
    over points (> 1: CodeCue is faster than the best native peer there); and each CodeCue method against
    CodeCue's own target-only decode on the same points."""
    by_point: dict[str, dict[str, float]] = {}
    for r in records:
        if r.tpot_ms > 0:
            by_point.setdefault(r.point, {})[r.method] = r.tpot_ms
    servers = [label for label in labels if label.startswith("server-")]
    lines = []
    for label in labels:
        if label in PEERS:
            continue
        best = [min(times[s] for s in servers if s in times) / times[label] for times in by_point.values()
                if label in times and any(s in times for s in servers)]
        if best:
            lines.append(f"{label} vs the best llama-server configuration per point: median time-per-token ratio "
                         f"{statistics.median(best):.3f} over {len(best)} points (> 1: faster)")
        own = [times["target"] / times[label] for times in by_point.values() if label in times and "target" in times]
        if own and label != "target":
            lines.append(f"{label} vs CodeCue's target-only decode: median time-per-token ratio "
                         f"{statistics.median(own):.3f}, lowest {min(own):.3f} over {len(own)} points")
    return lines


def format_k_comparison(comparison: dict[str, Any]) -> str:
    def speedup(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    def ratio(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    best = comparison["best_fixed_k"]
    fixed_ks = list(comparison["rows"][0]["fixed"]) if comparison["rows"] else []
    header = ["language", "tuned K", f"best fixed (K={best})", "K=4", "tuned / best fixed", "tuned identical",
              "hindsight", "hindsight / best fixed", *(f"K={k}" for k in fixed_ks)]
    rows = [header]
    for r in comparison["rows"]:
        rows.append([r["language"], speedup(r["tuned"]), speedup(r["best_fixed"]), speedup(r["k4"]),
                     ratio(r["tuned_vs_best_fixed"]), r["identical"], speedup(r.get("hindsight")),
                     ratio(r.get("hindsight_vs_best_fixed")), *(speedup(r["fixed"][k]) for k in fixed_ks)])
    return ("median TPOT speedup over target-only, per language (hindsight: per point the fastest fixed K, "
            "picked after the fact; a ceiling for any K choice)\n" + markdown_table(rows))


def draw_speedup_plot(summaries: list[Summary], methods: list[str], path: Path, title: str) -> None:
    """A PNG of each method's median speedup per language."""
    # matplotlib takes about half a second to import and only --plot needs it.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    langs = sorted({s.language for s in summaries if s.language != "all"}) + ["all"]
    shown = [m for m in methods if m != "target"]
    fig, ax = plt.subplots(figsize=(min(16, max(6, 0.25 * len(langs) * max(1, len(shown)))), 5))
    width = 0.8 / max(1, len(shown))
    for j, method in enumerate(shown):
        vals = []
        for lang in langs:
            s = next((s for s in summaries if s.method == method and s.language == lang), None)
            vals.append(s.median_speedup if s and s.median_speedup else 0)
        ax.bar([i + j * width for i in range(len(langs))], vals, width, label=method)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([i + width * (len(shown) - 1) / 2 for i in range(len(langs))], langs)
    ax.set_ylabel("median TPOT speedup over target-only")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=2 if len(shown) > 6 else 1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


# -- quality ------------------------------------------------------------------------------------------


def format_quality_summary(rows: list[dict[str, Any]]) -> str:
    header = ("variant", "points", "n", "exact %", "edit sim", "raw repeats suffix %", "stops right %", "prompt tok")
    table = [header] + [(r["variant"], r["points"], str(r["n"]), f"{r['exact']:.1f}", f"{r['edit_similarity']:.1f}",
                         f"{r['repeats_suffix']:.1f}", f"{r['stops_right']:.1f}", f"{r['prompt_tokens']:.0f}")
                        for r in rows]
    return markdown_table(table)


# -- keystroke replay and prompt cost -----------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "censored" if value is None else f"{value:.0f} ms"


def format_replay_pair(pair: dict[str, Any]) -> str:
    """A side-by-side table of a :func:`~codecue_bench.replay.run_replay_pair` report."""
    on, off = pair["reuse"], pair["no_reuse"]
    rows = [
        ("keystroke -> first text p50", _ms(on["first_text_ms"]["p50"]), _ms(off["first_text_ms"]["p50"])),
        ("keystroke -> first text p95", _ms(on["first_text_ms"]["p95"]), _ms(off["first_text_ms"]["p95"])),
        ("keystroke -> final item p50", _ms(on["final_ms"]["p50"]), _ms(off["final_ms"]["p50"])),
        ("keystroke -> final item p95", _ms(on["final_ms"]["p95"]), _ms(off["final_ms"]["p95"])),
        ("first text at pauses p50", _ms(on["first_text_ms_at_pauses"]["p50"]),
         _ms(off["first_text_ms_at_pauses"]["p50"])),
        ("keystrokes that showed text", f"{on['first_text_ms']['shown']}/{on['keystrokes']}",
         f"{off['first_text_ms']['shown']}/{off['keystrokes']}"),
        ("generations completed", str(on["generations"]), str(off["generations"])),
        ("prefilled tokens / prompt (mean)", f"{on['prefilled_tokens_mean']} / {on['prompt_tokens_mean']}",
         f"{off['prefilled_tokens_mean']} / {off['prompt_tokens_mean']}"),
        ("type-through / joined / diverged", f"{on['type_through']} / {on['adopted']} / {on['diverged']}",
         f"{off['type_through']} / {off['adopted']} / {off['diverged']}"),
    ]
    width = max(len(r[0]) for r in rows)
    head = (f"replay of {on['file']} ({on['file_tokens']} tokens), {on['keystrokes']} keystrokes, "
            f"{on['interval_ms']:.0f} ms apart ({on['pause_ms']:.0f} ms after word ends), "
            f"max {on['max_tokens']} tokens, backend {on['backend']}")
    lines = [head, f"{'':{width}}  {'reuse on':>14}  {'reuse off':>14}"]
    lines += [f"{name:{width}}  {a:>14}  {b:>14}" for name, a, b in rows]
    return "\n".join(lines)


def format_replay_layouts(report: dict[str, Any]) -> str:
    """A table of a :func:`~codecue_bench.replay.run_layout_comparison` report, one row per setting."""

    def keys(summary: dict[str, Any]) -> str:
        return str(summary["shown"] + summary["censored"])

    rows = [("layout", "unpredicted keys", "p50", "p90", "new-generation keys", "p50", "p90", "no suggestion",
             "Enter at new place", "p50", "p90")]
    for layout, r in report.items():
        typing, enter = r["typing"], r["enter"]["first_text_ms"]
        unpredicted, new = typing["first_text_ms_unpredicted"], typing["first_text_ms_new_generation"]
        rows.append((layout, keys(unpredicted), _ms(unpredicted["p50"]), _ms(unpredicted["p90"]), keys(new),
                     _ms(new["p50"]), _ms(new["p90"]), str(typing["nothing_to_show"]), str(r["enter"]["places"]),
                     _ms(enter["p50"]), _ms(enter["p90"])))
    return ("keystroke -> first ghost text (new-generation keys: the unpredicted ones and those that completed the "
            "suggestion; no suggestion: answered empty before the next key, not timed)\n" + markdown_table(rows))


def format_replay_peer(codecue: dict[str, tuple[dict[str, Any], dict[str, Any] | None]], peer: dict[str, Any]) -> str:
    """CodeCue's replay (each setting's typing and Enter reports) and llama.vim's on llama-server
    (:func:`~codecue_bench.llamavim_replay.run_llama_vim_replay`) side by side, p50 / p90 per event kind.

    CodeCue's *new generation* keys are those its suggestion on screen did not answer by type-through;
    llama.vim's, those its cache did not answer at once. First text: CodeCue's first streamed ghost text;
    llama.vim's, the first streamed text of its request (a streaming client's; llama.vim itself shows the
    final answer)."""

    def pair(summary: dict[str, Any] | None) -> str:
        if not summary:
            return "-"
        return f"{_ms(summary['p50'])} / {_ms(summary['p90'])} (n={summary['shown'] + summary['censored']})"

    kinds = [("keystroke, all: first text", "first_text_ms", "first_text_ms", False),
             ("keystroke, all: final", "final_ms", "final_ms", False),
             ("keystroke, new generation: first text", "first_text_ms_new_generation",
              "first_text_ms_new_generation", False),
             ("Enter at a new place: first text", "first_text_ms", "first_text_ms", True),
             ("Enter at a new place: final", "final_ms", "final_ms", True)]
    names = list(codecue)
    rows = [("event (p50 / p90)", *names, "llama-server/llama.vim")]
    for label, ours, theirs, enter in kinds:
        cells = []
        for name in names:
            typing, enter_report = codecue[name]
            source = enter_report if enter else typing
            cells.append(pair(source.get(ours) if source else None))
        rows.append((label, *cells, pair((peer.get("enter") if enter else peer["typing"]).get(theirs))))
    typing = peer["typing"]
    note = (f"llama.vim: {typing['from_cache']} of {typing['keystrokes']} keystrokes answered from its cache, "
            f"{typing['requested']} requested at their place; server {peer['server']} "
            f"({' '.join(peer['flags'])}), max {peer['max_tokens']} tokens")
    return "keystroke -> suggestion, CodeCue and llama.vim + llama-server on the same events\n" + markdown_table(rows) + "\n" + note


def format_prompt_costs(rows: list[dict[str, Any]]) -> str:
    header = ("file", "lines", "layout", "typing p50", "typing p90", "Enter p50", "Enter p90")
    table = [header] + [(r["file"], str(r["lines"]), r["layout"], str(r["typing"]["p50"]),
                         str(r["typing"]["p90"]), str(r["enter"]["p50"]), str(r["enter"]["p90"])) for r in rows]
    return "prompt tokens evaluated per keystroke that needs a new generation\n" + markdown_table(table)


# -- the context micro-benchmark ----------------------------------------------------------------------


def format_context_timings(result: dict[str, float]) -> str:
    return "\n".join([
        f"file: {int(result['lines'])} lines of Python, {int(result['samples'])} one-character edits",
        f"edit + incremental reparse:            median {result['reparse_median_ms']:.3f} ms",
        f"edit + CursorContext (target < 2 ms):  median {result['context_median_ms']:.3f} ms"
        f"  (p90 {result['context_p90_ms']:.3f} ms)",
    ])
