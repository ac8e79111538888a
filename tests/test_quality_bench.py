"""``codecue bench quality``: the points, the prompts of each variant and the scoring (no model)."""

from __future__ import annotations

from codecue.engine.fim import FILE_SEP, FIM_MIDDLE, REPO_NAME
from codecue_bench.quality import (
    QualityPoint,
    codecue_prompt,
    file_heads,
    llama_vim_prompt,
    project_points,
    score,
    select_points,
    summarise,
)


def test_project_points_cover_four_languages_and_mark_cross_file_lines():
    points = project_points()
    assert {p.language for p in points} >= {"python", "typescript", "go", "rust"}
    # totals.py calls apply_discount, which only tax.py defines; a line of plain arithmetic does not.
    cross = next(p for p in points if p.path == "totals.py" and "apply_discount(net" in p.hole)
    assert cross.cross_file and "tax.py" in dict(cross.others)
    local = next(p for p in points if p.path == "tax.py" and "amount.quantize(CENT" in p.hole)
    assert not local.cross_file  # CENT is tax.py's own, ROUND_HALF_UP the standard library's
    chosen = select_points(points, 26)
    assert len(chosen) >= 100 and len({p.language for p in chosen}) >= 4
    assert sum(p.cross_file for p in chosen) > len(chosen) // 2


def test_a_point_rebuilds_its_file():
    point = next(p for p in project_points(languages=["go"]) if p.path == "limiter.go")
    from codecue_bench.quality import PROJECTS_DIR

    original = (PROJECTS_DIR / point.project / point.path).read_text()
    assert point.prefix + point.hole + point.suffix == original


def test_variants_render_the_layouts_and_the_peer(tiny_tokenizer):
    point = next(p for p in project_points(languages=["python"]) if p.cross_file and p.path == "totals.py")
    chunks = codecue_prompt(tiny_tokenizer, point, "psm-mid", "chunks")
    assert chunks.startswith(REPO_NAME) and f"{FILE_SEP}totals.py\n" in chunks
    none = codecue_prompt(tiny_tokenizer, point, "psm", "none")
    assert REPO_NAME not in none and none.endswith(FIM_MIDDLE)
    peer = llama_vim_prompt(tiny_tokenizer, point)
    assert f"{FILE_SEP}filename\n" in peer and peer.endswith(FIM_MIDDLE + point.prefix.rsplit("\n", 1)[1])


def test_scoring():
    point = QualityPoint("p", "a.py", "python", 3, "def f(x):\n    ", "\n    return y\n", "y = g(x)", True, ())
    good = score(point, "v", "y = g(x)\n    return y\n", "eos", 10, 1.0)
    assert good.exact and good.edit_similarity == 1.0 and good.repeats_suffix and good.stops_right
    assert good.shown == "y = g(x)"
    wrong = score(point, "v", "y = h(x)\n    z = 1\n", "eos", 10, 1.0)
    assert not wrong.exact and 0.3 < wrong.edit_similarity < 1.0 and not wrong.repeats_suffix
    assert not wrong.stops_right
    rows = summarise([good, wrong])
    assert rows[0]["exact"] == 50.0 and rows[0]["n"] == 2 and rows[0]["repeats_suffix"] == 50.0


def test_file_heads_same_language_other_documents_in_stable_order():
    docs = [("file:///b.py", "python", "import b\n"), ("file:///a.py", "python", "import a\n" * 1000),
            ("file:///me.py", "python", "mine"), ("file:///c.go", "go", "package c"), ("file:///e.py", "python", " ")]
    got = file_heads(docs, "file:///me.py", "python", max_chars=50)
    assert [p for p, _ in got] == ["/a.py", "/b.py"]
    assert got[0][1] == "import a\n" * 5  # the head, cut at a line end
    assert got[1][1] == "import b\n"


def test_the_next_line_variant_scores_the_line_shown_at_enter_with_its_indentation(make_completer):
    from codecue_bench.quality import NEXT_LINE_VARIANT, line_before, next_line_prompt, run_quality

    points = [p for p in project_points(languages=["python"]) if p.path == "totals.py"]
    start = next(p for p in points if not p.typed and p.prefix.rsplit("\n", 1)[-1])  # an indented line start
    before = line_before(start)
    indent = start.prefix.rsplit("\n", 1)[-1]
    assert before is not None and before.hole == indent + start.hole and start.prefix == before.prefix + "\n" + indent
    assert line_before(QualityPoint(**{**start.__dict__, "typed": "x"})) is None

    completer = make_completer(draft=None)
    ids, job = next_line_prompt(completer, before, 8)
    assert job.prefix == before.prefix + "\n" and job.stop_rule is not None and job.stop_rule.next_line
    assert ids == completer.prompt_for(job, full=True)
    records = run_quality(completer, [start, QualityPoint(**{**start.__dict__, "typed": "x"})], [NEXT_LINE_VARIANT],
                          max_tokens=8)
    assert [r.point for r in records] == [start.name]  # a mid-line point has no line before to rest at
    record = records[0]
    assert record.exact == (record.shown.split("\n", 1)[0].rstrip() == indent + start.hole)


def test_a_full_prompt_variant_takes_its_own_suffix_and_context_budget(tiny_tokenizer, make_completer):
    import pytest

    from codecue.errors import CodeCueError
    from codecue_bench.quality import run_quality

    point = next(p for p in project_points(languages=["python"]) if p.path == "totals.py" and len(p.suffix) > 2000)
    short = codecue_prompt(tiny_tokenizer, point, "psm-mid", "none", suffix=16)
    long = codecue_prompt(tiny_tokenizer, point, "psm-mid", "none", suffix=256)
    suffix_of = lambda text: text.split("<|fim_suffix|>", 1)[1].split(FIM_MIDDLE, 1)[0]  # noqa: E731
    assert len(suffix_of(long)) > len(suffix_of(short)) and point.suffix.startswith(suffix_of(long))

    completer = make_completer(draft=None)
    records = run_quality(completer, [point], ["psm-mid/none+s16"], max_tokens=4)
    assert [r.variant for r in records] == ["psm-mid/none+s16"]
    assert records[0].prompt_tokens == len(tiny_tokenizer.encode(short, add_special_tokens=False))
    records = run_quality(completer, [point], ["psm-mid/chunks+c0", "psm-mid/chunks+s16+c512"], max_tokens=4)
    assert records[0].prompt_tokens < records[1].prompt_tokens  # the first has no context at all
    for bad in ("psm-mid/none+x16", "psm-mid/nothing+s16", "fim/none+s16", "psm-mid/none+sx", "psm-mid/none+s1+s2"):
        with pytest.raises(CodeCueError, match="unknown quality variant"):
            run_quality(completer, [point], [bad], max_tokens=4)
