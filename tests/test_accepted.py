"""Acceptance measured where it happens: the server counts suggestions shown and the accepts the clients
report (codecue/accepted), per language and context class, for codecue/stats and codecue doctor."""

from __future__ import annotations

import json

from codecue.acceptance import AcceptanceCounts, acceptance_path, load_counts
from harness.wait import until
from test_request import CHARACTER, LINE, SOURCE, SUFFIX_AFTER, Recording, Session


async def test_shown_and_accepted_suggestions_are_counted_per_language_and_class(tmp_path, make_completer,
                                                                                  monkeypatch):
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(tmp_path / "cfg"))
    from codecue.server.lsp import accepted

    monkeypatch.setattr(accepted, "_store", None)  # this test's machine counts
    session = Session(Recording(make_completer(draft=None)))
    uri = (tmp_path / "scale.py").as_uri()
    try:
        session.send("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                               "text": SOURCE + SUFFIX_AFTER}})
        text = await session.complete(uri, LINE, CHARACTER)
        place = session.server.completions.shown_at(uri)
        assert place is not None and place.language == "python"
        session.send("codecue/accepted", {"textDocument": {"uri": uri}, "kind": "word", "characters": 3})
        session.send("codecue/accepted", {"textDocument": {"uri": uri}, "kind": "whole", "characters": 12})
        session.send("codecue/accepted", {"textDocument": {"uri": uri}, "kind": "everything"})  # ignored
        session.send("codecue/accepted", {"kind": "whole"})  # no document: ignored
        msg_id = session.send("codecue/stats", {}, request=True)
        await until(lambda: session.answer(msg_id), what="the stats")
        suggestions = session.answer(msg_id)["result"]["suggestions"]
    finally:
        session.close()
    counts = suggestions["session"]["python"][place.context_class or "unknown"]
    assert counts == {"shown": 1 if text else 0, "accepted": {"whole": 1, "line": 0, "word": 1},
                      "acceptedCharacters": 15}
    assert suggestions["machine"] == suggestions["session"]
    # Kept on this machine, atomically: what codecue doctor reads.
    assert json.loads(acceptance_path().read_text())["python"] == suggestions["session"]["python"]
    assert load_counts().to_json() == suggestions["session"]


def test_counts_survive_a_broken_file(tmp_path):
    path = tmp_path / "acceptance.json"
    path.write_text('{"python": {"call_args": {"shown": "many", "accepted": {"whole": 2}}}, "go": 3}')
    counts = load_counts(path).to_json()
    assert counts == {"python": {"call_args": {"shown": 0, "accepted": {"whole": 2, "line": 0, "word": 0},
                                               "acceptedCharacters": 0}}}
    fresh = AcceptanceCounts()
    fresh.shown("go", None)
    assert fresh.to_json() == {"go": {"unknown": {"shown": 1, "accepted": {"whole": 0, "line": 0, "word": 0},
                                                  "acceptedCharacters": 0}}}
