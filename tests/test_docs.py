"""The user documentation stays true to what is in the repository.

- every file in docs/bench/ is a raw report (meta: CPU, class, flags, llama.cpp build, command, commit,
  date; no absolute path of the machine it ran on) or a file shown with one, and docs/measurements.md
  links it;
- docs/measurements.md is exactly what ``python benchmarks/measurements.py`` writes, so it cannot go stale;
- README.md is at most 300 lines, and every relative link (and anchor) in README.md, docs/*.md and
  editor_clients/README.md leads somewhere;
- the team-server command lines use the current llama-server's flags;
- the generator itself, on synthetic reports in a temporary directory: the page it writes, the reports it
  refuses, ``--check``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "docs" / "bench"
MEASUREMENTS = ROOT / "docs" / "measurements.md"
README = ROOT / "README.md"


def _load_generator():
    spec = importlib.util.spec_from_file_location("codecue_docs_measurements", ROOT / "benchmarks" / "measurements.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def bench_files() -> list[Path]:
    """Every raw report of the repository: docs/bench/ and the ones CodeCue ships as package data."""
    found = sorted(p for p in BENCH.iterdir() if not p.name.startswith(".")) if BENCH.is_dir() else []
    return found + [p for p in gen.SHIPPED if p.is_file()]


# -- the repository's own reports and page ------------------------------------------------------------------

def test_every_bench_file_is_linked_from_the_measurements_page() -> None:
    page = MEASUREMENTS.read_text(encoding="utf-8")
    unlinked = [p.name for p in bench_files()
                if f"({quote(os.path.relpath(p, MEASUREMENTS.parent))})" not in page]
    assert unlinked == [], "not linked from docs/measurements.md (run python benchmarks/measurements.py, or remove them)"


def test_every_report_says_where_and_how_it_was_measured() -> None:
    problems = []
    for path in (p for p in bench_files() if p.suffix == ".json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        meta = data.get("meta") if isinstance(data, dict) else None
        if not isinstance(meta, dict) or not meta.get("cpu") or not meta.get("command"):
            problems.append(f"{path.name}: meta must name the CPU and the command")
        problems += [f"{path.name}: {p}" for p in gen.meta_problems(meta)]
        problems += [f"{path.name}: absolute path {s!r}" for s in gen.absolute_paths(data)]
    assert problems == []


def test_the_bench_directory_holds_only_reports_and_their_files() -> None:
    gen.load_reports(BENCH, gen.SHIPPED)  # raises ReportError, one line per problem


def test_the_measurements_page_is_what_the_generator_writes() -> None:
    assert MEASUREMENTS.read_text(encoding="utf-8") == gen.generate(BENCH, MEASUREMENTS, gen.SHIPPED), (
        "docs/measurements.md is stale: run python benchmarks/measurements.py")


def test_the_readme_is_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move reference material to docs/"


# -- links --------------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """Markdown without its code blocks and code spans (a link written as code is not a link)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for title in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def link_problems(path: Path) -> list[str]:
    problems = []
    for target in _LINK.findall(prose(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{path.relative_to(ROOT)}: {target} does not exist")
            continue
        try:
            dest.relative_to(ROOT)
        except ValueError:
            problems.append(f"{path.relative_to(ROOT)}: {target} leaves the repository")
            continue
        if anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            problems.append(f"{path.relative_to(ROOT)}: {target}: no heading makes #{anchor}")
    return problems


DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "editor_clients" / "README.md"]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_somewhere(path: Path) -> None:
    assert link_problems(path) == []


def test_the_link_check_sees_broken_links_and_anchors(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "there.md").write_text("# A title, with `code`\n\n## Twice\n\n## Twice\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#a-title-with-code) [ok](there.md#twice-1) [ok](#own)\n"
                    "[web](https://example.com/x) `[code](missing.md)`\n\n```\n[fenced](missing.md)\n```\n"
                    "# Own\n[bad](missing.md) ![bad](img/x.png) [bad](there.md#nowhere)\n", encoding="utf-8")
    assert link_problems(page) == ["page.md: missing.md does not exist", "page.md: img/x.png does not exist",
                                   "page.md: there.md#nowhere: no heading makes #nowhere"]


# -- the team-server command lines -----------------------------------------------------------------------------

#: llama-server flags that were removed (common/arg.cpp: "the argument has been removed"); using one stops
#: the server at start-up
REMOVED_LLAMA_SERVER_FLAGS = ("--draft", "--draft-n", "--draft-max", "--draft-min", "--draft-n-min",
                              "--spec-ngram-size-n", "--spec-ngram-size-m", "--spec-ngram-min-hits")


def llama_server_commands() -> list[str]:
    commands = []
    for page in DOCS:
        for block in re.findall(r"^```\w*\n(.*?)^```", page.read_text(encoding="utf-8"), re.S | re.M):
            joined = block.replace("\\\n", " ")
            commands += [line for line in joined.splitlines() if line.lstrip().startswith("llama-server ")]
    return commands


def test_llama_server_command_lines_use_current_flags() -> None:
    commands = llama_server_commands()
    assert commands, "the README shows how to start llama-server for a team"
    for command in commands:
        words = command.split()
        assert not [w for w in words if w.split("=")[0] in REMOVED_LLAMA_SERVER_FLAGS], command
        if "-md" in words or "--spec-draft-model" in words:
            # a draft model alone drafts nothing: the current server needs the type of speculation
            assert "--spec-type" in words and "--spec-draft-n-max" in words, command


# -- the generator, on synthetic reports ----------------------------------------------------------------------

#: a commit of this repository, as a clean report names it
HEAD = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                      check=True, timeout=30).stdout.strip()
META = {"kind": "speed", "cpu": "Example CPU 9000", "cpu_flags": ["sse4_2", "avx2", "fma"], "cpu_class": "native",
        "llama_cpp": "0.3.36+codecue.0123abcd", "command": "codecue bench --json docs/bench/speed.json",
        "commit": HEAD, "date": "2026-12-02T10:00:00Z",
        "models": {"target": {"file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "bytes": 1117320768,
                              "layout": "Q4_K_M"}}}
SPEED_ROWS = [
    {"method": "default", "language": "all", "points": 16, "identical": 16, "median_tpot_ms": 33.79,
     "median_ttft_ms": 5139.2, "median_speedup": 1.2011, "acceptance_rate": 0.625, "extra": {}},
    {"method": "target", "language": "all", "points": 16, "identical": 16, "median_tpot_ms": 41.1,
     "median_ttft_ms": 5000.0, "median_speedup": 1.0, "acceptance_rate": None, "extra": {}},
]


def write(directory: Path, name: str, data: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def tables(text: str) -> list[tuple[str, str]]:
    """(the paragraph line before it, its header row) for every Markdown table in ``text``."""
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            out.append((before, line))
    return out


def test_no_reports_make_a_page_that_says_so(tmp_path: Path) -> None:
    for bench in (tmp_path / "missing", tmp_path / "empty"):
        if bench.name == "empty":
            bench.mkdir()
        text = gen.generate(bench, tmp_path / "measurements.md")
        assert "No measurements yet" in text and "|" not in text


def test_a_report_gets_a_section_that_names_its_cpu_command_commit_and_date(tmp_path: Path) -> None:
    bench, page = tmp_path / "docs" / "bench", tmp_path / "docs" / "measurements.md"
    write(bench, "speed+x.json", {"meta": META, "max_tokens": 64, "summary": SPEED_ROWS,
                                  "peer_ratios": ["llama-cpp-python target-only / default: 1.94x"]})
    (bench / "speed+x.png").write_bytes(b"\x89PNG")
    avx2 = dict(META, kind="quality", cpu_class="avx2", cpu_flags=["avx2"], date="2026-12-01T09:00:00+00:00",
                command="codecue bench --quality --json docs/bench/quality.json")
    write(bench, "quality.json", {"meta": avx2, "summary": [{"variant": "psm-mid/chunks", "n": 104,
                                                             "exact": 40.38, "nested": {"a": 1}}]})
    write(bench, "doctor.json", {"meta": dict(META, kind="doctor"), "chosen": "llama.cpp speculative", "k": 2})
    text = gen.generate(bench, page)

    for name in ("speed%2Bx.json", "speed%2Bx.png", "quality.json", "doctor.json"):
        assert f"(bench/{name})" in text
    assert text.index("### speed:") < text.index("### doctor:") < text.index("### quality:")  # native first
    for meta in (META, avx2):
        for value in (meta["cpu"], meta["llama_cpp"], f"`{meta['command']}`", f"`{meta['commit']}`", meta["date"],
                      ", ".join(sorted(meta["cpu_flags"]))):
            assert value in text
    flat = re.sub(r" +", " ", text)
    assert "| default | all | 16 | 16/16 | 33.8 | 5139 | 1.20x | 0.625 |" in flat
    assert "| target | all | 16 | 16/16 | 41.1 | 5000 | 1.00x | – |" in flat
    assert "- llama-cpp-python target-only / default: 1.94x" in text
    assert "| psm-mid/chunks | 104 | 40.4 |" in flat and "nested" not in text
    assert "| chosen | llama.cpp speculative |" in flat
    found = tables(text)
    assert len(found) == 5  # the index, speed's summary and settings, doctor's values, quality's summary
    for before, header in found:
        assert "CPU" in header or "CPU: Example CPU 9000 (" in before, (before, header)
    # written by main(), the page passes --check until a report changes
    assert gen.main(["--bench-dir", str(bench), "--output", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == text
    assert gen.main(["--check", "--bench-dir", str(bench), "--output", str(page)]) == 0
    write(bench, "doctor.json", {"meta": dict(META, kind="doctor"), "chosen": "llama.cpp target-only", "k": 0})
    assert gen.main(["--check", "--bench-dir", str(bench), "--output", str(page)]) == 1


@pytest.mark.parametrize(("name", "data", "problem"), [
    ("no-meta.json", {"summary": []}, 'no "meta" object'),
    ("no-cpu.json", {"meta": {k: v for k, v in META.items() if k != "cpu"}}, "meta lacks cpu"),
    ("extra.json", {"meta": dict(META, host="box")}, "unknown key(s) host"),
    ("class.json", {"meta": dict(META, cpu_class="avx512")}, "cpu_class must be one of native, avx2"),
    ("date.json", {"meta": dict(META, date="2026-12-02T10:00:00+01:00")}, "not in UTC"),
    ("home.json", {"meta": dict(META, kind="replay"), "file": "/home/dev/src/x.py"}, "absolute path"),
    ("cmd.json", {"meta": dict(META, kind="replay", command="codecue bench --replay /tmp/x.py")}, "absolute path"),
    ("win.json", {"meta": dict(META, kind="replay"), "model": "C:\\Users\\dev\\m.gguf"}, "absolute path"),
    ("speed.json", {"meta": META, "summary": [{"method": "default"}]}, "speed summary rows lack"),
    ("dirty.json", {"meta": dict(META, kind="replay", commit="0123abc-dirty")}, "uncommitted changes"),
    ("version.json", {"meta": dict(META, kind="replay", commit="0.1.0")}, "not made from a git checkout"),
    ("no-models.json", {"meta": {k: v for k, v in META.items() if k != "models"}}, "meta lacks models"),
    ("none-served.json", {"meta": dict(META, kind="quality", models={})}, "names no model file"),
    ("no-layout.json", {"meta": dict(META, kind="quality", models={"target": {"file": "t.gguf"}})},
     "must name the file and its layout"),
])
def test_reports_without_their_origin_are_refused(tmp_path: Path, name: str, data: dict, problem: str) -> None:
    write(tmp_path, name, data)
    with pytest.raises(gen.ReportError) as error:
        gen.load_reports(tmp_path)
    assert any(p.startswith(f"{name}: ") and problem in p for p in error.value.problems), error.value.problems
    assert gen.main(["--bench-dir", str(tmp_path), "--output", str(tmp_path / "m.md")]) == 2
    assert not (tmp_path / "m.md").exists()


def test_a_report_from_a_commit_the_repository_lacks_is_refused(tmp_path: Path, monkeypatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True, timeout=30)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True, timeout=30)
    made = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()
    assert gen.known_commit(made, repo) and not gen.known_commit("fedcba9876", repo)
    assert gen.known_commit("fedcba9876", tmp_path / "not-a-checkout")  # no history to ask: other checks apply
    monkeypatch.setattr(gen, "ROOT", repo)
    monkeypatch.setattr(gen.known_commit, "__defaults__", (repo,))
    bench = tmp_path / "bench"
    write(bench, "gone.json", {"meta": dict(META, kind="replay", commit="fedcba9876")})
    with pytest.raises(gen.ReportError) as error:
        gen.load_reports(bench)
    assert error.value.problems == ["gone.json: meta commit 'fedcba9876' is not a commit of this repository"]


def test_a_model_free_report_may_name_no_model_and_the_page_names_the_served_files(tmp_path: Path) -> None:
    write(tmp_path, "context.json", {"meta": dict(META, kind="context", models={}), "median_ms": 1.5})
    write(tmp_path, "speed.json", {"meta": META, "summary": SPEED_ROWS})
    text = gen.generate(tmp_path, tmp_path / "m.md")
    assert "- models: none (no model evaluated)" in text
    assert "- models: target: `qwen2.5-coder-1.5b-instruct-q4_k_m.gguf` (Q4_K_M, 1,117,320,768 bytes)" in text


def test_the_readme_links_only_checked_reports(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    checked = gen.load_reports(BENCH) if BENCH.is_dir() else []
    readme.write_text("[a gone report](docs/bench/gone.json), [another](./docs/bench/also.json#summary)\n\n"
                      "[ref]: docs/bench/third.json\n", encoding="utf-8")
    assert gen.readme_problems(checked, readme) == [
        f"README.md links docs/bench/{name}.json, which is not a checked report" for name in ("gone", "also", "third")]
    assert gen.readme_problems(checked) == []  # the repository's own README


def test_a_file_that_belongs_to_no_report_is_refused(tmp_path: Path) -> None:
    write(tmp_path, "speed.json", {"meta": META, "summary": SPEED_ROWS})
    (tmp_path / "notes.txt").write_text("measured on my laptop\n", encoding="utf-8")
    with pytest.raises(gen.ReportError) as error:
        gen.load_reports(tmp_path)
    assert [p.split(":")[0] for p in error.value.problems] == ["notes.txt"]


def test_relative_paths_and_urls_are_not_machine_paths() -> None:
    assert gen.absolute_paths({"file": "benchmarks/codecue_bench/corpus/python/a.py", "url": "https://example.com/tmp/x",
                               "note": "ratio 1/2", "command": "codecue bench --replay examples/stats.py"}) == []


# -- claims exactly as true as the default ---------------------------------------------------------------------

#: the documents a user reads about what CodeCue writes (the experiment log reports runs, not the default)
CLAIM_DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "editor_clients" / "README.md"]
#: words that promise output equal to the target's alone, whatever the cache holds
UNQUALIFIED = re.compile(r"\blossless\b|token for token what the target alone|output (is )?unchanged"
                         r"|exactly what the target", re.IGNORECASE)


def paragraph_with(text: str, start: str) -> str:
    """The paragraph of ``text`` that begins with ``start``."""
    at = text.index(start)
    end = text.find("\n\n", at)
    return text[at:end if end >= 0 else len(text)]


@pytest.mark.parametrize("path", [p for p in CLAIM_DOCS if p.name != "experiments.md"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_promises_output_the_default_can_change(path: Path) -> None:
    assert UNQUALIFIED.findall(path.read_text(encoding="utf-8")) == []


def test_the_readme_says_what_the_default_decoding_guarantees() -> None:
    """The README's claim follows the default: with shifted reuse on, it says that the output is the target's
    from the same cache state and can differ from a fresh evaluation, and how to turn that off; with it off,
    it may not say that the output differs."""
    from codecue.models.config import DecodingSettings

    readme = README.read_text(encoding="utf-8")
    claim = " ".join(paragraph_with(readme, "**What the output equals.**").split())
    assert "the same KV-cache state" in claim
    reuse = DecodingSettings().chunk_reuse
    if reuse > 0:
        assert f"(`--chunk-reuse {reuse}`)" in claim and "By default" in claim
        assert "can differ from a fresh evaluation" in claim and "`--chunk-reuse 0`" in claim
        numbers = re.findall(r"\[([\d.]+ %)[^\]]*\]\((docs/bench/[^)]+\.json)\)", claim)
        assert len(numbers) >= 2, "the measured difference links its raw reports"
    else:
        assert "can differ from a fresh evaluation" not in claim
