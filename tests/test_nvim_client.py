"""The Neovim plugin in a real headless Neovim, against tests/nvim/mock_server.py.

The mock speaks the server's protocol (inline completion with a range, the codecue/partialCompletion
stream, codecue/stats, cancellation) with a scripted "perfect model", and logs what it received, so these
tests pin the client's behaviour exactly: what is drawn, what is inserted, what is cancelled. The same
plugin against the real server with tiny models is tests/test_nvim_server.py.

Most tests run twice: with Neovim's built-in vim.lsp.inline_completion (0.12+) and with the plugin's own
extmark engine (what 0.10/0.11 use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.nvim import NvimSession, find_nvim, mock_server_cmd, nvim_version, read_log

NVIM, _ = find_nvim()  # for the engines to parametrize with; the nvim_bin fixture decides skip or fail
pytestmark = pytest.mark.usefixtures("nvim_bin")

SCRIPT = 'def add(a, b):\n    return a + b\n\n\ndef main():\n    print(add(1, 2))\n    s = "h\u00e9llo \U0001f600"\n    return s\n'
MAX_CHARS = 40
TYPED = "def ad"
# What the mock answers after TYPED: the script's next MAX_CHARS characters.
COMPLETION = SCRIPT[len(TYPED) : len(TYPED) + MAX_CHARS]
assert COMPLETION == "d(a, b):\n    return a + b\n\n\ndef main():\n"


def engines() -> list[Any]:
    params = [pytest.param(False, id="extmark")]
    if NVIM is not None and nvim_version(NVIM) >= (0, 12):
        params.insert(0, pytest.param("auto", id="native"))
    return params


@pytest.fixture
def script_file(tmp_path: Path) -> Path:
    path = tmp_path / "script.txt"
    path.write_text(SCRIPT)
    return path


@pytest.fixture
def start(tmp_path: Path, script_file: Path, nvim_bin: str):
    """start(native=..., **mock_options) -> (session, server_log). Sessions are closed after the test."""
    sessions: list[NvimSession] = []

    def _start(native: Any = "auto", setup: dict[str, Any] | None = None, **mock_options: Any):
        log = tmp_path / f"server{len(sessions)}.log"
        options = {"max_chars": MAX_CHARS, "delay_ms": 40, "chunk": 6, **mock_options}
        config = {
            "cmd": mock_server_cmd(script_file, log, **options),
            "native": native,
            "restart": {"delay_ms": 200, "max_delay_ms": 400, "max_attempts": 50},
            **(setup or {}),
        }
        session = NvimSession(nvim_bin, config, tmp_path)
        sessions.append(session)
        return session, log

    yield _start
    for session in sessions:
        session.close()


def open_python(session: NvimSession, tmp_path: Path, text: str = "") -> Path:
    path = tmp_path / "example.py"
    session.edit(path, text)
    session.wait_attached()
    return path


def responses(log: Path) -> list[dict[str, Any]]:
    return [e for e in read_log(log) if e["event"] == "response"]


@pytest.mark.parametrize("native", engines())
def test_ghost_text_appears_and_equals_the_servers_completion(start, tmp_path, native):
    nvim, log = start(native)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the full completion as ghost text")
    answered = responses(log)
    assert answered and answered[-1]["text"] == COMPLETION
    # Ghost text is not buffer text.
    assert nvim.lines() == [TYPED]
    assert nvim.mode() == "i"


@pytest.mark.parametrize("native", engines())
def test_ghost_text_grows_while_streaming(start, tmp_path, native):
    nvim, log = start(native, chunk=5, delay_ms=60)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the full completion")
    [answer] = [e for e in responses(log) if e["text"] == COMPLETION]
    stream = [e for e in nvim.events() if e["source"] == "stream" and e["request_id"] == answer["id"]]
    drawn = [e["drawn"] for e in stream]
    # Each partial was drawn as it came, each one longer than the last and a prefix of the next.
    assert len(drawn) >= 5, drawn
    for shorter, longer in zip(drawn, drawn[1:], strict=False):
        assert shorter is not None and longer.startswith(shorter) and len(longer) > len(shorter), drawn
    assert drawn[-1] == COMPLETION
    assert stream[-1]["done"] is True
    assert [e["done"] for e in stream[:-1]] == [False] * (len(stream) - 1)


@pytest.mark.parametrize("native", engines())
def test_typing_on_cancels_the_stale_suggestion(start, tmp_path, native):
    nvim, log = start(native, chunk=2, delay_ms=120)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    first = nvim.wait_for(lambda: nvim.visible(), "the first streamed text")
    assert COMPLETION.startswith(first) and first != COMPLETION
    stale_request = [e for e in read_log(log) if e["event"] == "request"][-1]

    nvim.type("z")  # goes another way than the suggestion
    fresh = "pass  # mock completion at offset 7"
    seen: list[str | None] = []

    def fresh_shown() -> bool:
        seen.append(nvim.visible())
        return seen[-1] == fresh

    nvim.wait_for(fresh_shown, "the suggestion for the new position")
    assert nvim.lines() == [TYPED + "z"]
    # Nothing of the old suggestion was drawn after the keystroke: only prefixes of the new one.
    assert all(text is None or fresh.startswith(text) for text in seen), seen
    # The old generation was stopped (cancelled by the client or superseded) and never answered.
    events = read_log(log)
    stopped = {e["id"] for e in events if e["event"] in ("cancelled", "superseded")}
    assert stale_request["id"] in stopped
    assert stale_request["id"] not in {e["id"] for e in events if e["event"] == "response"}


@pytest.mark.parametrize("native", engines())
def test_accept_line_then_accept_all_insert_exactly_the_suggestion(start, tmp_path, native):
    nvim, log = start(native)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the completion")

    nvim.type("<M-j>")  # accept line
    nvim.wait_for(lambda: nvim.lines() == ["def add(a, b):"], "the first line accepted")
    assert tuple(nvim.nvim.current.window.cursor) == (1, len("def add(a, b):"))
    # The rest stays on screen at once ...
    assert (nvim.visible() or "").startswith("\n    return a + b")
    # ... until the server's next answer (for the new position) replaces it.
    at = len("def add(a, b):")
    following = SCRIPT[at : at + MAX_CHARS]
    nvim.wait_for(lambda: nvim.visible() == following, "the next answer")

    nvim.type("<M-l>")  # accept all
    nvim.wait_for(lambda: nvim.text() == SCRIPT[: at + MAX_CHARS], "exactly the suggestion accepted")
    assert nvim.mode() == "i"
    # Each accept told the server what it took (codecue/accepted), for its counts.
    def accepts() -> list[dict[str, Any]] | None:
        found = [e for e in read_log(log) if e["event"] == "accepted"]
        return found if len(found) >= 2 else None

    accepts = nvim.wait_for(accepts, "the accepts reported")
    assert [(e["kind"], e["characters"]) for e in accepts] == [("line", len("d(a, b):")), ("whole", len(following))]


@pytest.mark.parametrize("native", engines())
def test_accept_all_puts_exactly_the_ghost_text_in_the_buffer(start, tmp_path, native):
    nvim, _ = start(native)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the completion")
    nvim.type("<M-l>")
    nvim.wait_for(lambda: nvim.text() == TYPED + COMPLETION, "the completion in the buffer")
    lines = (TYPED + COMPLETION).split("\n")
    assert tuple(nvim.nvim.current.window.cursor) == (len(lines), len(lines[-1]))


@pytest.mark.parametrize("native", engines())
def test_accept_word_takes_one_word_at_a_time(start, tmp_path, native):
    nvim, _ = start(native)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the completion")
    nvim.type("<M-w>")
    nvim.wait_for(lambda: nvim.lines() == ["def add"], "one word accepted")
    nvim.wait_for(lambda: (nvim.visible() or "").startswith(COMPLETION[1:]), "the rest shown")
    nvim.type("<M-w>")
    nvim.wait_for(lambda: nvim.lines() == ["def add("], "the punctuation run accepted")


@pytest.mark.parametrize("native", engines())
def test_accepting_mid_stream_inserts_what_was_shown(start, tmp_path, native):
    nvim, log = start(native, chunk=3, delay_ms=250)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    shown = nvim.wait_for(lambda: (v := nvim.visible()) and len(v) >= 3 and v, "some streamed text")
    nvim.type("<M-l>")
    nvim.wait_for(lambda: nvim.text() != TYPED, "the streamed text accepted")
    inserted = nvim.text()[len(TYPED) :]
    # Exactly what was on screen, or the little more that streamed in before the key was handled.
    assert inserted.startswith(shown) and COMPLETION.startswith(inserted), (shown, inserted)


@pytest.mark.parametrize("native", engines())
def test_dismiss_hides_and_keys_fall_through_when_nothing_is_shown(start, tmp_path, native):
    nvim, log = start(native, setup={"keymaps": {"accept": "<Tab>"}})
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the completion")
    nvim.type("<C-]>")
    nvim.wait_for(lambda: nvim.visible() is None, "the suggestion dismissed")
    assert nvim.lines() == [TYPED]
    # Nothing shown: <Tab> is a tab again.
    nvim.type("<Tab>")
    # (python's ftplugin sets expandtab: the tab becomes spaces up to the next stop)
    nvim.wait_for(lambda: nvim.lines() == [TYPED + "  "], "a tab inserted")


@pytest.mark.parametrize("native", engines())
def test_an_answer_that_crosses_the_dismissal_stays_hidden(start, tmp_path, native):
    nvim, log = start(native, answer_delay_ms=1500)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    # The whole text streamed (the answer itself is held back by the server)...
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the streamed completion")
    assert responses(log) == []
    nvim.type("<C-]>")
    nvim.wait_for(lambda: nvim.visible() is None, "the suggestion dismissed")
    # ...then the answer arrives although the request was cancelled: nothing may come back on screen.
    nvim.wait_for(lambda: responses(log), "the server's answer")
    nvim.settle()  # the answer has reached the plugin, and what it scheduled has run
    assert nvim.visible() is None
    assert nvim.lines() == [TYPED]


@pytest.mark.parametrize("native", engines())
def test_next_and_previous_alternatives(start, tmp_path, native):
    nvim, _ = start(native, items=2)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the first alternative")
    # The last streamed piece can be drawn before the final answer (with its alternatives) is in; cycling
    # is for a settled suggestion, so wait for it as a user's eye would.
    nvim.wait_for(lambda: nvim.lua("local s = require('codecue.suggestion').get(vim.api.nvim_get_current_buf()) "
                                   "return s.stream == nil and s.items ~= nil and #s.items >= 2"),
                  "the final answer with both alternatives")
    alternative = COMPLETION.split("\n")[0] + "  # alternative 1"
    nvim.type("<M-]>")
    nvim.wait_for(lambda: nvim.visible() == alternative, "the second alternative")
    nvim.type("<M-[>")
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "back to the first")
    nvim.type("<M-]>")
    nvim.wait_for(lambda: nvim.visible() == alternative, "the second again")
    nvim.type("<M-l>")
    nvim.wait_for(lambda: nvim.text() == TYPED + alternative, "the alternative accepted")


@pytest.mark.parametrize("native", engines())
def test_type_through_keeps_the_suggestion_without_a_flicker(start, tmp_path, native):
    nvim, _ = start(native)
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the completion")
    nvim.type("d(")
    nvim.wait_for(lambda: nvim.lines() == [TYPED + "d("], "typed")
    # The characters typed match the suggestion: its rest is drawn at once, from the old answer (the
    # server's next answer, if already in, starts with the same text).
    assert (nvim.visible() or "").startswith(COMPLETION[2:])


@pytest.mark.parametrize("native", engines())
def test_non_ascii_positions_go_in_utf16(start, tmp_path, native):
    """An emoji (2 UTF-16 units, 4 bytes) and an é (1 unit, 2 bytes) before the cursor."""
    nvim, log = start(native)
    end = SCRIPT.index("\U0001f600") + 1
    open_python(nvim, tmp_path, SCRIPT[:end])
    nvim.type('GA"')
    rest = SCRIPT[end + 1 : end + 1 + MAX_CHARS]
    nvim.wait_for(lambda: nvim.visible() == rest, "the completion after the emoji")
    line = SCRIPT[:end].split("\n")[-1] + '"'
    requests = [e for e in read_log(log) if e["event"] == "request"]
    # Columns are counted in the encoding client and server agreed on at initialize.
    encoding = nvim.lua("return require('codecue')._server.client().offset_encoding")
    unit = {"utf-8": 1, "utf-16": 2, "utf-32": 4}[encoding]
    codec = {"utf-8": "utf-8", "utf-16": "utf-16-le", "utf-32": "utf-32-le"}[encoding]
    assert requests[-1]["character"] == len(line.encode(codec)) // unit != len(line)
    nvim.type("<M-l>")
    nvim.wait_for(lambda: nvim.text() == SCRIPT[: end + 1 + MAX_CHARS], "accepted")


@pytest.mark.skipif(NVIM is None or nvim_version(NVIM) < (0, 12), reason="the early start needs Neovim 0.12")
def test_the_server_starts_before_the_filetypes_own_plugins_run(start, tmp_path):
    """Opening a Python file runs Neovim's Python ftplugin (its provider probe takes a second or more on a
    slow machine) before FileType reaches the plugin: the server is already starting by then, one server,
    which then serves the buffer. A file of another type starts nothing."""
    ftplugin = tmp_path / "config" / "nvim" / "ftplugin" / "python.lua"
    ftplugin.parent.mkdir(parents=True)
    ftplugin.write_text("_G.server_started_before_ftplugin = require('codecue')._server.client() ~= nil\n")
    nvim, log = start("auto")
    nvim.edit(tmp_path / "notes.txt", "plain text\n")
    assert nvim.lua("return require('codecue')._server.client() == nil")
    open_python(nvim, tmp_path)
    assert nvim.lua("return _G.server_started_before_ftplugin") is True
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the early server's suggestion")
    assert len(nvim.server_pids()) == 1
    assert [e["event"] for e in read_log(log)].count("initialize") == 1


def test_killed_server_is_reported_once_and_recovered(start, tmp_path):
    nvim, log = start("auto")
    open_python(nvim, tmp_path)
    [server_pid] = nvim.server_pids()
    import os
    import signal

    os.kill(server_pid, signal.SIGKILL)
    nvim.wait_for(lambda: any("stopped" in m["msg"] for m in nvim.messages()), "the crash message")
    nvim.wait_for(lambda: nvim.server_state() == "running", "the server restarted")
    nvim.wait_attached()
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "suggestions again after the restart")
    messages = [m["msg"] for m in nvim.messages()]
    crash = [m for m in messages if "stopped" in m]
    assert len(crash) == 1, messages
    assert "CodeCue" in crash[0] and "signal 9" in crash[0]
    # Neovim's own generic "Client codecue quit with exit code ..." is replaced by ours.
    assert not any("quit with exit code" in m for m in messages), messages
    assert any("back" in m for m in messages), messages
    assert nvim.server_pids() and server_pid not in nvim.server_pids()


def test_missing_model_says_why_once_and_recovers_when_it_appears(start, tmp_path):
    model = tmp_path / "model.gguf"
    nvim, log = start("auto", require_file=model)
    nvim.edit(tmp_path / "example.py", "")
    nvim.wait_for(lambda: any("model not found" in m["msg"] for m in nvim.messages()), "the model message")
    # It keeps retrying in the background, without repeating itself.
    nvim.wait_for(
        lambda: nvim.lua("return require('codecue')._server.failures") >= 3, "three failed restarts"
    )
    errors = [m for m in nvim.messages() if m["level"] >= 4]
    assert len(errors) == 1, errors
    assert str(model) in errors[0]["msg"]
    assert "down" in " ".join(nvim.lua("return require('codecue').status_lines()"))

    model.write_text("now it exists")
    nvim.wait_attached()
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "suggestions once the model is there")
    assert any("back" in m["msg"] for m in nvim.messages())


def test_missing_server_command_is_one_clear_message(start, tmp_path):
    nvim, _ = start("auto", setup={"cmd": ["codecue-does-not-exist", "serve", "--stdio"]})
    nvim.edit(tmp_path / "example.py", "")
    nvim.wait_for(lambda: nvim.messages(), "a message")
    nvim.type("ix<Esc>ay")
    nvim.wait_for(lambda: nvim.lines() == ["xy"], "typing still works")
    messages = [m["msg"] for m in nvim.messages()]
    assert len(messages) == 1 and "codecue-does-not-exist" in messages[0] and "not found" in messages[0]


def test_stats_command_shows_acceptance_and_speed(start, tmp_path):
    nvim, _ = start("auto")
    open_python(nvim, tmp_path)
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "one completion")
    nvim.type("<Esc>")
    nvim.nvim.command("CodeCue stats")
    report = nvim.wait_for(lambda: [m["msg"] for m in nvim.messages() if "tokens/s" in m["msg"]], "the stats")
    assert "acceptance  75%" in report[0] and "117.6 tokens/s" in report[0] and "speculation on" in report[0]
    assert "python" in report[0] and "total" in report[0]
    assert nvim.lua("return require('codecue').statusline()") == "CodeCue 75% 118 tok/s"


@pytest.mark.parametrize("native", engines())
def test_toggle_off_sends_nothing_and_on_again_works(start, tmp_path, native):
    nvim, log = start(native)
    open_python(nvim, tmp_path)
    nvim.nvim.command("CodeCue toggle")
    assert nvim.lua("return require('codecue').statusline()") == "CodeCue off"
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.lines() == [TYPED], "typed while off")
    nvim.settle()  # a (wrong) request the typing set off would have reached the server by now
    assert [e for e in read_log(log) if e["event"] == "request"] == []
    assert nvim.visible() is None
    nvim.type("<Esc>")
    nvim.nvim.command("CodeCue toggle")
    nvim.type("ad")
    nvim.wait_for(
        lambda: nvim.visible() == SCRIPT[len(TYPED) + 1 :][:MAX_CHARS], "a suggestion once on again"
    )
    requests = [e for e in read_log(log) if e["event"] == "request"]
    assert requests and all(e["character"] == len(TYPED) + 1 for e in requests), requests


def test_status_command_and_bad_options(start, tmp_path):
    nvim, _ = start("auto", setup={"max_tokens": -3, "bogus": 1, "keymaps": {"accept": 42}})
    open_python(nvim, tmp_path)
    messages = [m["msg"] for m in nvim.messages()]
    assert any('"max_tokens" must be a positive number' in m for m in messages), messages
    assert any('unknown option "bogus"' in m for m in messages), messages
    assert any('keymap "accept" must be' in m for m in messages), messages
    nvim.nvim.command("CodeCue status")
    status = nvim.wait_for(
        lambda: [m["msg"] for m in nvim.messages() if "server: running" in m["msg"]], "status"
    )
    assert "engine:" in status[0]
    # The defaulted keymap still accepts.
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the completion")
    nvim.type("<M-l>")
    nvim.wait_for(lambda: nvim.text() == TYPED + COMPLETION, "accepted with the default key")


def test_init_options_reach_the_server(start, tmp_path):
    setup = {"max_tokens": 16, "temperature": 0.2, "model": {"target": "t.gguf", "draft": "d.gguf"}}
    nvim, log = start("auto", setup=setup)
    open_python(nvim, tmp_path)
    [init] = [e for e in read_log(log) if e["event"] == "initialize"]
    assert init["options"] == {
        "maxTokens": 16,
        "temperature": 0.2,
        "model": {"target": "t.gguf", "draft": "d.gguf"},
    }


def test_custom_keymaps_replace_the_defaults(start, tmp_path):
    nvim, _ = start("auto", setup={"keymaps": {"accept": "<C-y>", "accept_line": False}})
    open_python(nvim, tmp_path)
    assert nvim.lua("return vim.fn.maparg('<M-j>', 'i')") == ""
    nvim.type("i" + TYPED)
    nvim.wait_for(lambda: nvim.visible() == COMPLETION, "the completion")
    nvim.type("<C-y>")
    nvim.wait_for(lambda: nvim.text() == TYPED + COMPLETION, "accepted with <C-y>")


TAKE_CASES = [
    ("d(a, b):\n    return", "line", "d(a, b):"),
    ("\n    return a\n", "line", "\n    return a"),
    ("tail", "line", "tail"),
    ("d(a, b)", "word", "d"),
    ("(a, b)", "word", "("),
    ("  return a", "word", "  return"),
    ("\n    return", "word", "\n    "),
    (", b)", "word", ","),
    ("   ", "word", "   "),
    ("x\ny", "all", "x\ny"),
]


def test_how_much_one_accept_takes(start):
    nvim, _ = start("auto")
    got = [
        nvim.lua("return require('codecue.suggestion').take(...)", rest, kind) for rest, kind, _ in TAKE_CASES
    ]
    assert got == [taken for _, _, taken in TAKE_CASES]
