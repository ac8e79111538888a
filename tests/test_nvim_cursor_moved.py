"""The Neovim plugin sends ``codecue/cursorMoved``: a real headless Neovim against tests/nvim/mock_server.py,
which logs every notification it gets (with its arrival time).

Both engines (the built-in vim.lsp.inline_completion of 0.12 and the plugin's extmark engine) are run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness.nvim import NvimSession, find_nvim, mock_server_cmd, nvim_version, read_log

NVIM, _ = find_nvim()  # for the engines to parametrize with; the nvim_bin fixture decides skip or fail
pytestmark = pytest.mark.usefixtures("nvim_bin")

# Line 3 (0-based) has an é (2 bytes, 1 UTF-16 unit) and an emoji (4 bytes, 2 UTF-16 units).
TEXT = 'def add(a, b):\n    return a + b\n\n    s = "h\u00e9llo \U0001f600 world"\nprint(s)\n'
QUIET_S = 1.0  # how long "nothing more is sent" is watched for


def engines() -> list[Any]:
    params = [pytest.param(False, id="extmark")]
    if NVIM is not None and nvim_version(NVIM) >= (0, 12):
        params.insert(0, pytest.param("auto", id="native"))
    return params


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@pytest.fixture
def start(tmp_path: Path):
    """start(native, setup) -> (session, server_log, file uri); the session has a Python file open and
    attached, and the notification sent for where the cursor was on opening (if any) is already in."""
    sessions: list[NvimSession] = []

    def _start(native: Any = "auto", setup: dict[str, Any] | None = None):
        script = tmp_path / "script.txt"
        script.write_text(TEXT)
        log = tmp_path / f"server{len(sessions)}.log"
        # --utf16: positions in UTF-16, whatever Neovim offers, as the real server has them
        cmd = mock_server_cmd(script, log, max_chars=20, delay_ms=20, chunk=5) + ["--utf16"]
        config = {"cmd": cmd, "native": native, **(setup or {})}
        session = NvimSession(NVIM, config, tmp_path)
        sessions.append(session)
        path = tmp_path / "example.py"
        session.edit(path, TEXT)
        session.wait_attached()
        time.sleep(QUIET_S)  # the attach's own notification (at line 0) comes and goes
        return session, log, path.as_uri()

    yield _start
    for session in sessions:
        session.close()


def moves(log: Path) -> list[dict[str, Any]]:
    return [e for e in read_log(log) if e["event"] == "cursorMoved"]


def quiet(log: Path, count: int) -> None:
    """Nothing more than ``count`` notifications for QUIET_S."""
    deadline = time.monotonic() + QUIET_S
    while time.monotonic() < deadline:
        assert len(moves(log)) == count, moves(log)
        time.sleep(0.05)


@pytest.mark.parametrize("native", engines())
def test_moving_the_cursor_sends_one_notification_after_the_pause_in_utf16(start, native):
    debounce_ms = 300
    nvim, log, uri = start(native, {"cursor_moved": {"debounce_ms": debounce_ms}})
    before = len(moves(log))
    assert nvim.lua("return require('codecue')._server.client().offset_encoding") == "utf-16"
    # Several moves, each within the pause of the one before: one notification, for the last place.
    for keys in ["j", "j", "j", "$"]:
        last_move = time.time()  # no later than the move itself
        nvim.type(keys)
        time.sleep(0.05)
    nvim.wait_for(lambda: len(moves(log)) > before, "the notification")
    quiet(log, before + 1)
    sent = moves(log)[-1]
    line = TEXT.split("\n")[3]
    assert tuple(nvim.nvim.current.window.cursor) == (4, len(line[:-1].encode()))  # on the closing quote
    assert (sent["uri"], sent["line"]) == (uri, 3)
    assert sent["character"] == utf16_len(line[:-1]) == len(line[:-1]) + 1  # the emoji counts twice
    assert sent["time"] - last_move >= debounce_ms / 1000  # never before the pause is over

    # Moving back and forth to the same place sends nothing new; a new place does.
    nvim.type("h")
    time.sleep(0.05)
    nvim.type("l")
    quiet(log, before + 1)
    nvim.type("gg0")
    nvim.wait_for(lambda: len(moves(log)) == before + 2, "the notification for the new place")
    assert (moves(log)[-1]["line"], moves(log)[-1]["character"]) == (0, 0)


@pytest.mark.parametrize("native", engines())
def test_nothing_is_sent_while_a_suggestion_is_shown_or_typed_through(start, native):
    nvim, log, _ = start(native)
    before = len(moves(log))
    # Retype the last line: the mock's "model" knows the script, so it suggests the rest of the line.
    # (Insert mode: the engine asks for a completion wherever the cursor stops.)
    nvim.type("GSpr")
    nvim.wait_for(lambda: (nvim.visible() or "").startswith("int(s)"), "a suggestion")
    nvim.type("in")  # typed through
    nvim.wait_for(
        lambda: nvim.lines()[-1] == "prin" and (nvim.visible() or "").startswith("t(s)"),
        "the rest of the suggestion",
    )
    quiet(log, before)
    nvim.type("<Esc>")  # the suggestion goes, the cursor steps back onto the "n"
    nvim.wait_for(lambda: len(moves(log)) == before + 1, "the notification after leaving insert mode")
    last = moves(log)[-1]
    assert (last["line"], last["character"]) == (4, len("pri"))
    quiet(log, before + 1)


def test_no_notification_for_a_buffer_the_server_does_not_complete(start, tmp_path):
    nvim, log, _ = start("auto")
    before = len(moves(log))
    notes = tmp_path / "notes.txt"
    nvim.edit(notes, "one\ntwo\nthree\n")
    assert nvim.lua("return vim.bo.filetype") == "text"
    for keys in ["j", "j", "$", "gg"]:
        nvim.type(keys)
        time.sleep(0.2)
    quiet(log, before)
    assert not [m for m in moves(log) if m["uri"] == notes.as_uri()]


@pytest.mark.parametrize("native", engines())
def test_no_notification_while_suggestions_are_off(start, native):
    nvim, log, _ = start(native)
    before = len(moves(log))
    nvim.nvim.command("CodeCue disable")
    nvim.type("jj$")
    quiet(log, before)
    nvim.nvim.command("CodeCue enable")
    nvim.type("k")
    nvim.wait_for(lambda: len(moves(log)) == before + 1, "a notification once on again")


def test_no_notification_when_turned_off_in_setup(start):
    nvim, log, _ = start("auto", {"cursor_moved": False})
    assert nvim.lua("return require('codecue.config').options.cursor_moved.enabled") is False
    nvim.type("jj$")
    quiet(log, 0)
    # Suggestions themselves still work.
    nvim.type("Goimport o")
    nvim.wait_for(lambda: nvim.visible(), "a suggestion")


def test_bad_cursor_moved_options_are_reported_and_defaulted(start):
    nvim, _, _ = start("auto", {"cursor_moved": {"debounce_ms": -1, "enabled": "yes", "bogus": 1}})
    messages = [m["msg"] for m in nvim.messages()]
    assert any("cursor_moved.debounce_ms must be" in m for m in messages), messages
    assert any("cursor_moved.enabled must be" in m for m in messages), messages
    assert any('unknown cursor_moved option "bogus"' in m for m in messages), messages
    assert nvim.lua("return require('codecue.config').options.cursor_moved") == {
        "enabled": True,
        "debounce_ms": 150,
    }
