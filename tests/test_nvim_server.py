"""The Neovim plugin in a real headless Neovim against the real server (`codecue serve --stdio --in-process`).

Tiny random-weight models (tests/conftest.py) for all but one test, which uses the real default pair. The
completions of a random model are gibberish, but deterministic, and that is all these tests need: what is
drawn must be what the server answered, it must grow while streaming, accepting must insert exactly it.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.nvim import NvimSession

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("nvim_bin")]

REPO = Path(__file__).resolve().parents[1]
PREFIX = "import os\n\n\ndef add(a, b):\n    return a + b\n\n\ndef main():\n    "
TYPED = "print(x"
MAX_TOKENS = 24


def serve_cmd(target: Path | str, draft: Path | str, in_process: bool = True) -> list[str]:
    return [
        sys.executable, "-m", "codecue.cli", "serve", "--stdio", *(["--in-process"] if in_process else []),
        "--target", str(target), "--draft", str(draft),
    ]  # fmt: skip


@pytest.fixture
def start(tmp_path: Path, tiny_dirs: dict[str, Path], nvim_bin: str):
    """start(setup=None, cmd=None) -> session on the tiny pair; closed after the test."""
    if importlib.util.find_spec("codecue.commands.serve") is None:
        pytest.fail("codecue.commands.serve is missing: `codecue serve` is not built")
    sessions: list[NvimSession] = []

    def _start(setup: dict[str, Any] | None = None, cmd: list[str] | None = None,
               cache_dir: Path | None = None) -> NvimSession:
        config = {
            "cmd": cmd or serve_cmd(tiny_dirs["target"], tiny_dirs["target"]),
            "max_tokens": MAX_TOKENS,
            "restart": {"delay_ms": 300, "max_delay_ms": 1000, "max_attempts": 50},
            **(setup or {}),
        }
        session = NvimSession(
            nvim_bin, config, tmp_path, extra_env={"CODECUE_CACHE_DIR": str(cache_dir or tmp_path / "cache")}
        )
        sessions.append(session)
        return session

    yield _start
    for session in sessions:
        session.close()


def open_and_type(nvim: NvimSession, tmp_path: Path, typed: str = TYPED) -> None:
    path = tmp_path / "example.py"
    nvim.edit(path, PREFIX + "\n")
    nvim.wait_attached()
    nvim.nvim.command("normal! G")  # the last line, "    " (the file's final newline ends it)
    nvim.nvim.command("startinsert!")
    nvim.type(typed)
    nvim.wait_for(lambda: nvim.lines()[-1] == "    " + typed, "the typing to land")


def final_events(nvim: NvimSession) -> list[dict[str, Any]]:
    return [e for e in nvim.events() if e["source"] == "final"]


def server_answer(nvim: NvimSession) -> str | None:
    """Ask the server directly (same document, same cursor) what it completes."""
    return nvim.lua(
        """
        local client = require('codecue')._server.client()
        local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
        params.context = { triggerKind = 1 }
        local response = client:request_sync('textDocument/inlineCompletion', params, 60000, 0)
        if not response or response.err or not response.result then return nil end
        local items = response.result.items or response.result
        return items[1] and items[1].insertText or nil
        """
    )


def test_ghost_text_equals_the_servers_completion_and_grows_while_streaming(start, tmp_path):
    nvim = start()
    open_and_type(nvim, tmp_path)
    [final] = nvim.wait_for(lambda: final_events(nvim), "a final completion")
    text = final["text"]
    assert text, "the tiny model answered an empty completion; pick another prefix"
    nvim.wait_for(lambda: nvim.visible() == as_drawn(nvim, text), "the completion drawn as ghost text")
    assert server_answer(nvim) == text
    assert nvim.lines()[-1] == "    " + TYPED  # ghost text is not buffer text

    # The stream of that request: the ghost text on screen grew while it streamed, each state extending the
    # last, up to the final text.
    stream = [e for e in nvim.events() if e["source"] == "stream" and e["request_id"] == final["request_id"]]
    drawn = [e["drawn"] for e in stream if e["drawn"] is not None]
    assert len(stream) >= 2, stream
    assert stream[-1]["done"] is True and stream[-1]["text"] == text
    for shorter, longer in itertools.pairwise(drawn):
        assert longer.startswith(shorter), drawn
    assert len(set(drawn)) >= 2, f"the drawn ghost text never grew while streaming: {drawn}"
    assert drawn[-1] == as_drawn(nvim, text), drawn


def test_typing_on_cancels_the_stale_suggestion(start, tmp_path):
    nvim = start()
    open_and_type(nvim, tmp_path)
    [first] = nvim.wait_for(lambda: final_events(nvim), "a first completion")
    old = first["text"]
    nvim.wait_for(lambda: nvim.visible() == as_drawn(nvim, old), "it drawn")
    # Type a character the suggestion does not continue with.
    diverging = "Z" if not old.startswith("Z") else "Q"
    before = len(nvim.events())
    nvim.type(diverging)
    seen: list[str | None] = []

    def new_final() -> list[dict[str, Any]]:
        seen.append(nvim.visible())
        return [e for e in nvim.events()[before:] if e["source"] == "final"]

    finals = nvim.wait_for(new_final, "the completion for the new position")
    fresh = finals[-1]["text"]
    nvim.wait_for(lambda: nvim.visible() == as_drawn(nvim, fresh), "the new completion drawn")
    # After the keystroke nothing of the old suggestion was drawn: only (prefixes of) the new one.
    stale = old[1:] if old else None
    drawn = as_drawn(nvim, fresh)
    for text in seen:
        assert text is None or drawn.startswith(text), (text, fresh, stale)
    assert nvim.lines()[-1] == "    " + TYPED + diverging


def as_drawn(nvim: NvimSession, text: str) -> str:
    """``text`` as Neovim draws ghost text: control characters of the tiny model's gibberish as ``^Y``."""
    return "\n".join(nvim.lua("return vim.fn.strtrans(...)", line) for line in text.split("\n"))


def wait_nonempty_final(nvim: NvimSession, since: int) -> str:
    """The first non-empty final answer after event `since`; types a space if an answer was empty."""
    for _ in range(5):
        finals = nvim.wait_for(
            lambda start=since: [e for e in nvim.events()[start:] if e["source"] == "final"],
            "the server's answer",
        )
        text = finals[-1]["text"]
        if text:
            drawn = as_drawn(nvim, text)
            nvim.wait_for(lambda expected=drawn: nvim.visible() == expected, "the answer drawn")
            return text
        since = len(nvim.events())
        nvim.type(" ")
    raise AssertionError(f"five empty answers in a row; {nvim.diagnostics()}")


def test_accept_line_then_accept_all_insert_exactly_the_suggestion(start, tmp_path):
    nvim = start()
    open_and_type(nvim, tmp_path)
    text = wait_nonempty_final(nvim, 0)
    line_part = nvim.lua("return require('codecue.suggestion').take(...)", text, "line")
    assert line_part and text.startswith(line_part)
    before, cursor = nvim.text(), nvim.nvim.current.window.cursor
    since = len(nvim.events())

    nvim.type("<M-j>")
    expected = insert_at(before, cursor, line_part)
    nvim.wait_for(lambda: nvim.text() == expected, "exactly the line accepted")

    # The server answers at the new position; accept-all inserts exactly what it shows.
    shown = wait_nonempty_final(nvim, since)
    before, cursor = nvim.text(), nvim.nvim.current.window.cursor
    nvim.type("<M-l>")
    expected = insert_at(before, cursor, shown)
    nvim.wait_for(lambda: nvim.text() == expected, "exactly the suggestion accepted")


def insert_at(text: str, cursor: list[int], insert: str) -> str:
    """`text` with `insert` put at a (1-based row, 0-based byte col) cursor."""
    lines = text.split("\n")
    row, col = cursor[0] - 1, cursor[1]
    line = lines[row].encode()
    lines[row] = (line[:col] + insert.encode() + line[col:]).decode()
    return "\n".join(lines)


def test_killed_server_is_reported_and_recovered(start, tmp_path):
    nvim = start()
    open_and_type(nvim, tmp_path)
    nvim.wait_for(lambda: final_events(nvim), "a completion")
    [server_pid] = nvim.server_pids()
    os.kill(server_pid, signal.SIGKILL)
    nvim.wait_for(lambda: any("stopped" in m["msg"] for m in nvim.messages()), "the crash message")
    nvim.wait_for(lambda: nvim.server_state() == "running", "the restarted server")
    nvim.wait_attached()
    count = len(final_events(nvim))
    nvim.type("x")
    nvim.wait_for(lambda: len(final_events(nvim)) > count, "a completion from the new server")
    messages = [m["msg"] for m in nvim.messages()]
    assert len([m for m in messages if "stopped" in m]) == 1, messages
    assert not any("quit with exit code" in m for m in messages), messages
    assert server_pid not in nvim.server_pids()


def test_missing_model_is_one_clear_message(start, tmp_path):
    """The server starts without loading models; the first completion fails to load them, and the user
    is told once, in one line, while later requests fail quietly and editing goes on."""
    missing = tmp_path / "no-such-model"
    nvim = start(cmd=serve_cmd(missing, missing))
    nvim.edit(tmp_path / "example.py", "")
    nvim.wait_attached()
    nvim.type("iimport o")
    nvim.wait_for(
        lambda: [m for m in nvim.messages() if "no-such-model" in m["msg"]],
        "a message naming the missing model",
    )
    lsp_log = tmp_path / "state" / "nvim" / "lsp.log"

    def failed() -> int:
        return lsp_log.read_text(errors="replace").count("model path not found") if lsp_log.exists() else 0

    seen = failed()
    nvim.type("s")
    nvim.wait_for(lambda: failed() > seen, "a second failed completion")
    naming = [m for m in nvim.messages() if "no-such-model" in m["msg"]]
    assert len(naming) == 1, nvim.messages()
    assert "Traceback" not in naming[0]["msg"] and "\n" not in naming[0]["msg"].strip()
    assert nvim.lines() == ["import os"]
    assert nvim.visible() is None


@pytest.mark.realmodels
def test_real_pair_ghost_text_and_accept(runtime, start, tmp_path, real_models):
    """Also the cold start as a user meets it: the server as Neovim runs it by default (through the per-user
    daemon, in the test's own runtime dir: set up before Neovim starts and stopped after it closes), the
    machine's own cache (models fetched, native checks and costs cached), and the time from the spawn and
    from opening the file to the first ghost text drawn, printed for the record (not asserted: the machines
    are noisy)."""
    from codecue.backends.cpu_class import cpu_class
    from codecue.paths import cache_dir

    target, draft = (getattr(source, "path", source) for source in real_models)
    # The server is spawned through sh, which notes the moment first: the cold start is also timed from
    # the spawn (what Neovim does before it, its Python ftplugin among it, is Neovim's).
    spawned_at = tmp_path / "spawned-at"
    spawn_clock = ["sh", "-c", '[ -e "$0" ] || date +%s.%N > "$0"; exec "$@"', str(spawned_at)]
    nvim = start(cmd=[*spawn_clock, *serve_cmd(target, draft, in_process=False)], cache_dir=cache_dir())
    path = tmp_path / "fib.py"
    opened = time.perf_counter()
    nvim.edit(path, "def fibonacci(n):\n    if n < 2:\n        return n\n    return \n")
    nvim.wait_attached()  # typed as soon as the server answers initialize: the models load meanwhile
    nvim.nvim.command("call cursor(4, 1)")
    nvim.nvim.command("startinsert!")
    nvim.type("fib")
    nvim.wait_for(lambda: nvim.visible(), "the first ghost text", timeout=300)
    cold_ms, shown_at = (time.perf_counter() - opened) * 1e3, time.time()
    from_spawn_ms = (shown_at - float(spawned_at.read_text())) * 1e3
    print(f"\nNeovim cold start ({cpu_class()} class): first ghost text {from_spawn_ms:.0f} ms after Neovim spawned "
          f"the server, {cold_ms:.0f} ms after opening the file", file=sys.__stderr__)
    [final] = nvim.wait_for(lambda: final_events(nvim), "a completion from the real pair", timeout=300)
    text = final["text"]
    nvim.wait_for(lambda: nvim.visible() == text, "it drawn")
    # The recursive call, whether the model names the function in full or as typed.
    assert re.search(r"fib\w*\(n ?- ?1\)", "fib" + text), text
    nvim.type("<M-l>")
    nvim.wait_for(lambda: "fib" + text in nvim.text(), "accepted")
