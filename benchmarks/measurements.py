"""docs/measurements.md, generated from the raw reports in docs/bench/.

    python benchmarks/measurements.py            # check the reports and write docs/measurements.md
    python benchmarks/measurements.py --check    # exit 1 when docs/measurements.md is not what this writes

A raw report is the JSON a benchmark writes (``codecue bench ... --json FILE``): one object whose ``meta``
holds exactly ``kind``, ``cpu``, ``cpu_flags``, ``cpu_class``, ``llama_cpp``, ``command``, ``commit``,
``date`` and ``models`` (see :data:`META_KEYS`), and may hold a ``note``; the rest depends on the
kind. A report is made from a clean commit (``commit`` is a bare hash: not ``-dirty``, not a package version)
and names every model file it served (``models``: role -> file name, size and weight layout), so that the
code and the weights behind each number can be found again. A file next to a report that shares its
name up to the extension (``speed-x.png`` next to ``speed-x.json``) is shown with it. Every report gets one
section that names its CPU, class, flags, llama.cpp build, command, commit and date and links the raw
file; every table says which CPU it was measured on. A report that breaks these rules (a missing meta key,
an absolute path of the machine it ran on, a file that belongs to no report) is refused with one line per
problem (exit 2), so the page never shows a number whose origin is unknown.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python benchmarks/measurements.py` from a checkout
    sys.path.insert(0, str(ROOT))

from codecue.tables import markdown_table  # noqa: E402 - after the checkout is on the path

BENCH_DIR = ROOT / "docs" / "bench"
OUTPUT = ROOT / "docs" / "measurements.md"
#: raw reports CodeCue ships as package data and reads at run time (the layout-quality record behind the
#: runtime plan's derived layouts): on the page like the ones in docs/bench, checked the same way
SHIPPED = (ROOT / "codecue" / "models" / "layout_quality.json",)
COMMAND = "python benchmarks/measurements.py"

#: what every raw report's ``meta`` holds, and nothing else
META_KEYS = ("kind", "cpu", "cpu_flags", "cpu_class", "llama_cpp", "command", "commit", "date", "models")
#: the kinds that evaluate no model (tree-sitter timings): their ``models`` may be empty
MODEL_FREE_KINDS = ("context",)
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
#: README.md: every report it links must be one of the checked reports
README = ROOT / "README.md"
_REPORT_LINK = re.compile(r"(?:\]\(|^\[[^\]]+\]:\s*)(?:\./)?(docs/bench/[^)#\s]+\.json)", re.MULTILINE)
#: what a meta may hold besides: ``note``, what the command does not say (a setting changed in code for the run)
OPTIONAL_META_KEYS = ("note",)
CPU_CLASSES = ("native", "avx2")
#: the order sections of one CPU come in; other kinds follow, by name
KIND_ORDER = ("speed", "quality", "replay", "prompt-cost", "k-compare", "remote", "doctor")
#: the speed report's summary columns, in this order, and how each is written
SPEED_COLUMNS = {
    "method": ("method", None),
    "language": ("language", None),
    "points": ("points", None),
    "identical": ("identical", None),
    "median_tpot_ms": ("time per token, median (ms)", lambda v: f"{v:.1f}"),
    "median_ttft_ms": ("first token, median (ms)", lambda v: f"{v:.0f}"),
    "median_speedup": ("speedup, median", lambda v: f"{v:.2f}x"),
}
ATTACHMENT_IMAGES = (".png", ".svg", ".jpg", ".jpeg")

# A path on the machine that ran the benchmark: a home, temp or system directory, a home shorthand, a
# Windows drive. Reports name files relative to the repository, or by their name alone.
_ABSOLUTE_PATH = re.compile(
    r"(?:^|[\s\"'=(,:;\[{])"
    r"(?:/(?:home|root|Users|tmp|var|private|mnt|media|opt|srv|usr|work|data|scratch|nix|run|etc)(?:/|$)"
    r"|~/|[A-Za-z]:[\\/])")


class ReportError(Exception):
    """Reports that cannot be shown; ``problems`` has one line each."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class Report:
    path: Path
    meta: dict[str, Any]
    body: dict[str, Any]
    attachments: tuple[Path, ...]

    @property
    def sort_key(self) -> tuple[Any, ...]:
        kind = self.meta["kind"]
        rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
        return (CPU_CLASSES.index(self.meta["cpu_class"]), self.meta["cpu"], rank, kind, self.meta["date"],
                self.path.name)


def absolute_paths(value: Any) -> list[str]:
    """Every string in ``value`` (keys too, recursively) that holds an absolute path of some machine."""
    found: list[str] = []
    if isinstance(value, str):
        if _ABSOLUTE_PATH.search(value):
            found.append(value if len(value) <= 80 else value[:77] + "...")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += absolute_paths(key) + absolute_paths(item)
    elif isinstance(value, list):
        for item in value:
            found += absolute_paths(item)
    return found


def meta_problems(meta: Any) -> list[str]:
    """What is wrong with a report's ``meta`` (empty when nothing is)."""
    if not isinstance(meta, dict):
        return ['no "meta" object']
    problems = []
    missing = [k for k in META_KEYS if k not in meta]
    extra = sorted(set(meta) - set(META_KEYS) - set(OPTIONAL_META_KEYS))
    if missing:
        problems.append(f"meta lacks {', '.join(missing)}")
    if extra:
        problems.append(f"meta has unknown key(s) {', '.join(extra)} (it holds exactly {', '.join(META_KEYS)})")
    for key in ("kind", "cpu", "llama_cpp", "command", "commit", "date"):
        if key in meta and (not isinstance(meta[key], str) or not meta[key].strip()):
            problems.append(f"meta {key} must be a non-empty string")
    flags = meta.get("cpu_flags")
    if "cpu_flags" in meta and (not isinstance(flags, list) or not all(isinstance(f, str) for f in flags)):
        problems.append("meta cpu_flags must be a list of strings")
    if "cpu_class" in meta and meta["cpu_class"] not in CPU_CLASSES:
        problems.append(f"meta cpu_class must be one of {', '.join(CPU_CLASSES)}, not {meta['cpu_class']!r}")
    commit = meta.get("commit")
    if isinstance(commit, str) and commit.strip() and not _COMMIT.fullmatch(commit):
        why = ("made from a tree with uncommitted changes" if commit.endswith("-dirty")
               else "not made from a git checkout")
        problems.append(f"meta commit {commit!r}: {why}; run it again from a clean commit")
    elif isinstance(commit, str) and not known_commit(commit):
        problems.append(f"meta commit {commit!r} is not a commit of this repository")
    if "models" in meta:
        problems += models_problems(meta["models"], meta.get("kind"))
    date = meta.get("date")
    if isinstance(date, str) and date.strip():
        try:
            parsed = datetime.fromisoformat(date.replace("Z", "+00:00"))
        except ValueError:
            problems.append(f"meta date {date!r} is not ISO 8601")
        else:
            if parsed.utcoffset() is None or parsed.utcoffset().total_seconds() != 0:
                problems.append(f"meta date {date!r} is not in UTC (end it with Z)")
    return problems


def known_commit(commit: str, repo: Path = ROOT) -> bool:
    """Whether ``commit`` names a commit of ``repo``; True where its history cannot say (no git, not a
    checkout, a shallow clone): the rest of the checks still apply there."""
    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)

    try:
        shallow = git("rev-parse", "--is-shallow-repository")
        if shallow.returncode != 0 or shallow.stdout.strip() != "false":
            return True
        return git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return True


def models_problems(models: Any, kind: Any) -> list[str]:
    """What is wrong with a report's ``models``: role -> {file, bytes, layout} for every file served."""
    if not isinstance(models, dict):
        return ["meta models must be an object: role -> the model file served"]
    if not models and kind not in MODEL_FREE_KINDS:
        return ["meta models names no model file: a report says which files it served"]
    problems = []
    for role, entry in models.items():
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) and entry[k].strip()
                                                  for k in ("file", "layout")):
            problems.append(f"meta models[{role!r}] must name the file and its layout")
    return problems


def readme_problems(reports: Sequence[Report], readme: Path = README) -> list[str]:
    """README links to raw reports that are not among the checked ``reports``."""
    if not readme.is_file():
        return []
    checked = {r.path.resolve() for r in reports}
    links = _REPORT_LINK.findall(readme.read_text(encoding="utf-8"))
    return [f"README.md links {link}, which is not a checked report" for link in dict.fromkeys(links)
            if (ROOT / link).resolve() not in checked]


def body_problems(kind: Any, body: dict[str, Any]) -> list[str]:
    if kind != "speed":
        return []
    rows = body.get("summary")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return ["a speed report needs summary rows"]
    lacking = sorted({k for r in rows for k in SPEED_COLUMNS if k not in r})
    return [f"speed summary rows lack {', '.join(lacking)}"] if lacking else []


def load_reports(bench_dir: Path, shipped: Sequence[Path] = ()) -> list[Report]:
    """The reports in ``bench_dir`` (none when it does not exist) and the ``shipped`` ones, checked;
    ReportError lists what is wrong."""
    files = sorted(p for p in bench_dir.iterdir() if not p.name.startswith(".")) if bench_dir.is_dir() else []
    files += [p for p in shipped if p.is_file()]
    problems: list[str] = []
    reports: list[Report] = []
    jsons = [p for p in files if p.suffix == ".json"]
    claimed: set[Path] = set(jsons)
    for path in jsons:
        where = path.name
        attachments = tuple(p for p in files if p not in claimed and p.name.startswith(path.stem + "."))
        claimed.update(attachments)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"{where}: not readable JSON ({exc})")
            continue
        if not isinstance(data, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        found = [f"{where}: {p}" for p in meta_problems(data.get("meta"))]
        found += [f"{where}: {p}" for p in body_problems((data.get("meta") or {}).get("kind"), data)]
        found += [f"{where}: holds an absolute path of the machine it ran on: {s!r}"
                  for s in dict.fromkeys(absolute_paths(data))]
        if found:
            problems += found
            continue
        body = {k: v for k, v in data.items() if k != "meta"}
        reports.append(Report(path, data["meta"], body, attachments))
    for path in files:
        if path not in claimed:
            problems.append(f"{path.name}: neither a JSON report nor a file named after one (REPORT.png next to "
                            "REPORT.json)")
    if problems:
        raise ReportError(problems)
    return sorted(reports, key=lambda r: r.sort_key)


# -- rendering ---------------------------------------------------------------------------------------------

def scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def fmt(value: Any) -> str:
    """A value as a table cell shows it."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        size = abs(value)
        if size >= 100:
            return f"{value:.0f}"
        if size >= 10:
            return f"{value:.1f}"
        if size >= 1:
            return f"{value:.2f}"
        return f"{value:.3f}"
    return str(value)


def cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as one inline code span, whatever backticks it holds."""
    text = " ".join(text.split())
    ticks = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def heading(key: str) -> str:
    return key.replace("_", " ")


def table(rows: Sequence[Sequence[str]]) -> str:
    return markdown_table([[cell(c) for c in row] for row in rows])


def cpu_caption(meta: dict[str, Any]) -> str:
    return f"CPU: {meta['cpu']} ({meta['cpu_class']} class)"


def link(path: Path, output: Path) -> str:
    return quote(Path(os.path.relpath(path, output.parent)).as_posix())


def speed_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    extra = [k for k in dict.fromkeys(k for r in rows for k in r)
             if k not in SPEED_COLUMNS and all(scalar(r.get(k)) for r in rows)]
    header = [title for title, _ in SPEED_COLUMNS.values()] + [heading(k) for k in extra]
    out = [header]
    for r in rows:
        line = []
        for key, (_, write) in SPEED_COLUMNS.items():
            value = r[key]
            if key == "identical" and isinstance(value, int) and not isinstance(value, bool) \
                    and isinstance(r.get("points"), int):
                line.append(f"{value}/{r['points']}")
            elif write is None or value is None or isinstance(value, bool) or not isinstance(value, int | float):
                line.append(fmt(value))
            else:
                line.append(write(value))
        out.append(line + [fmt(r.get(k)) for k in extra])
    return out


def flat_rows(value: Any) -> list[dict[str, Any]] | None:
    """``value`` as table rows when it is a non-empty list of dicts of scalars (other values left out)."""
    if not isinstance(value, list) or not value or not all(isinstance(r, dict) for r in value):
        return None
    return value


def rows_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    keys = [k for k in dict.fromkeys(k for r in rows for k in r) if all(scalar(r.get(k)) for r in rows)]
    return [[heading(k) for k in keys]] + [[fmt(r.get(k)) for k in keys] for r in rows]


def scalars_table(body: dict[str, Any]) -> list[list[str]] | None:
    items = [(k, v) for k, v in body.items() if scalar(v)]
    if not items:
        return None
    return [["field", "value"]] + [[heading(k), fmt(v)] for k, v in items]


def peer_lines(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    if isinstance(value, dict) and all(scalar(v) for v in value.values()):
        return [f"{k}: {fmt(v)}" for k, v in value.items()]
    return []


def captioned(meta: dict[str, Any], title: str, rows: list[list[str]]) -> list[str]:
    return [f"{title}, {cpu_caption(meta)}:", "", table(rows), ""]


def render_report(report: Report, output: Path) -> list[str]:
    meta, body = report.meta, report.body
    raw = link(report.path, output)
    flags = ", ".join(sorted(meta["cpu_flags"])) or "none recorded"
    lines = [
        f"### {meta['kind']}: {meta['cpu']}, {meta['cpu_class']} class, {meta['date'][:10]}",
        "",
        f"- CPU: {meta['cpu']}, {meta['cpu_class']} class",
        f"- CPU flags: {flags}",
        f"- llama.cpp: {meta['llama_cpp']}",
        f"- command: {code(meta['command'])}",
        f"- commit: {code(meta['commit'])}, date: {meta['date']}",
        f"- models: {served_models(meta['models'])}",
        f"- raw report: [{report.path.name}]({raw})",
        *([f"- note: {meta['note']}"] if meta.get("note") else []),
        "",
    ]
    summary = flat_rows(body.get("summary"))
    shown: set[str] = set()
    if meta["kind"] == "speed" and summary is not None:
        lines += captioned(meta, "Summary", speed_table(summary))
        shown.add("summary")
        peers = peer_lines(body.get("peer_ratios"))
        if peers:
            lines += [f"Peer ratios, {cpu_caption(meta)}:", ""] + [f"- {cell(p)}" for p in peers] + [""]
            shown.add("peer_ratios")
        elif flat_rows(body.get("peer_ratios")):
            lines += captioned(meta, "Peer ratios", rows_table(body["peer_ratios"]))
            shown.add("peer_ratios")
    elif summary is not None:
        lines += captioned(meta, "Summary", rows_table(summary))
        shown.add("summary")
    values = scalars_table({k: v for k, v in body.items() if k not in shown})
    if values:
        lines += captioned(meta, "Values" if not shown else "Settings", values)
    for attachment in report.attachments:
        target = link(attachment, output)
        if attachment.suffix.lower() in ATTACHMENT_IMAGES:
            lines += [f"![{attachment.name}, {cpu_caption(meta)}]({target})", ""]
        else:
            lines += [f"- with it: [{attachment.name}]({target})", ""]
    return lines


def served_models(models: dict[str, Any]) -> str:
    """The model files a report served, one clause each: ``role: file (layout, N bytes)``."""
    if not models:
        return "none (no model evaluated)"
    return "; ".join(f"{role}: {code(m['file'])} ({m['layout']}"
                     + (f", {m['bytes']:,} bytes" if isinstance(m.get("bytes"), int) else "")
                     + (f"; tensors {m['tensor_types']})" if m.get("tensor_types") else ")")
                     for role, m in models.items())


def render(reports: Iterable[Report], output: Path = OUTPUT) -> str:
    """The whole page for ``reports`` (already checked and sorted)."""
    reports = list(reports)
    lines = [
        "# Measurements",
        "",
        f"<!-- Generated by `{COMMAND}` from docs/bench/. Edit the reports or the generator, not this file;",
        f"     `{COMMAND} --check` (and tests/test_docs.py) fail when it is stale. -->",
        "",
        "Every number here comes from a raw report in `docs/bench/` (or shipped with CodeCue), made by a",
        "`codecue` command on one machine. Each section names that machine's CPU, its class (`native`:",
        "llama.cpp compiled for that",
        "CPU; `avx2`: compiled for AVX2 only, what most laptops and cloud VMs run), the llama.cpp build, the",
        "exact command, the commit and the date. Numbers from different CPUs, classes or runs are not",
        "comparable: compare rows of one table. A CPU is named by its model name with its family and model",
        "numbers; reports made before CodeCue recorded those name it by model name alone, and its flags tell",
        "such CPUs apart (the `AMD EPYC` reports with `avx_vnni` are of family 26, model 2: Zen 5).",
        "",
        "To add a report: run the benchmark with `--json docs/bench/NAME.json`, then",
        f"`{COMMAND}`.",
        "",
    ]
    if not reports:
        lines += ["No measurements yet: `docs/bench/` holds no report.", ""]
        return "\n".join(lines)
    index = [["kind", "CPU", "class", "date", "raw report"]]
    for r in reports:
        index.append([r.meta["kind"], r.meta["cpu"], r.meta["cpu_class"], r.meta["date"][:10],
                      f"[{r.path.name}]({link(r.path, output)})"])
    lines += ["## Reports", "", markdown_table(index), ""]
    group = None
    for r in reports:
        key = (r.meta["cpu_class"], r.meta["cpu"])
        if key != group:
            group = key
            lines += [f"## {r.meta['cpu']}, {r.meta['cpu_class']} class", ""]
        lines += render_report(r, output)
    return "\n".join(lines).rstrip("\n") + "\n"


def generate(bench_dir: Path = BENCH_DIR, output: Path = OUTPUT, shipped: Sequence[Path] = ()) -> str:
    return render(load_reports(bench_dir, shipped), output)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is not what this writes")
    parser.add_argument("--bench-dir", type=Path, default=BENCH_DIR, help="the raw reports (default: docs/bench)")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the page (default: docs/measurements.md)")
    args = parser.parse_args(argv)
    try:
        # The shipped records belong to the repository's page, not to a directory named on the command line.
        reports = load_reports(args.bench_dir, SHIPPED if args.bench_dir.resolve() == BENCH_DIR.resolve() else ())
    except ReportError as exc:
        for problem in exc.problems:
            print(f"{args.bench_dir}/{problem}", file=sys.stderr)
        return 2
    if args.bench_dir.resolve() == BENCH_DIR.resolve() and (problems := readme_problems(reports)):
        for problem in problems:
            print(problem, file=sys.stderr)
        return 2
    text = render(reports, args.output)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
        if current != text:
            print(f"{args.output} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(args.output.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.output)
    print(f"wrote {args.output} ({len(reports)} reports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
