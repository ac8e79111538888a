"""The test harness itself (tests/harness): ``need`` skips or fails as the run requires, the LSP client
reads a server's output strictly and keeps answers apart by id, and waits end on their condition."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest

from harness import runtimes
from harness.lsp import LspClient, frame, well_formed_problem
from harness.runtimes import REQUIRE_ENV, need, need_hardware, need_llama_cpp
from harness.wait import until, until_sync

pytest_plugins = ["pytester"]

# -- need: skip, or fail where the runtimes are required ------------------------------------------------


def test_need_returns_when_the_runtime_is_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    need(True, "never shown")
    monkeypatch.delenv(REQUIRE_ENV)
    need(True, "never shown")


def test_need_skips_without_the_runtime_when_it_is_not_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="llama.cpp unavailable: no wheel"):
        need(False, "llama.cpp unavailable: no wheel")
    monkeypatch.setenv(REQUIRE_ENV, "")  # set but empty: not required
    with pytest.raises(pytest.skip.Exception):
        need(False, "nvim unavailable")


def test_need_fails_without_the_runtime_when_it_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"real models not pulled.*{REQUIRE_ENV} is set"):
        need(False, "real models not pulled")


def test_hardware_skips_even_when_runtimes_are_required(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI requires the runtimes and has no GPU: a GPU test skips there, it does not fail."""
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.skip.Exception, match="needs a CUDA GPU"):
        need_hardware(False, "torch_cuda needs a CUDA GPU; torch sees none")
    need_hardware(True, "never shown")


def test_a_failed_llama_cpp_build_fails_where_it_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtimes, "llama_cpp_problem", lambda: "llama-cpp-python is installed but does not load")
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="llama.cpp unavailable: llama-cpp-python is installed but"):
        need_llama_cpp()
    monkeypatch.delenv(REQUIRE_ENV)
    with pytest.raises(pytest.skip.Exception, match="llama.cpp unavailable"):
        need_llama_cpp()


@pytest.mark.parametrize(("required", "outcome"), [("", {"skipped": 2}), ("1", {"errors": 1, "failed": 1})])
def test_a_run_with_a_missing_runtime_is_red_only_where_required(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 required: str, outcome: dict[str, int]) -> None:
    """What CI sees: a session whose runtime is missing passes with skips, unless the runtimes are required,
    and then it fails, whether the need is checked in a fixture (an error) or in the test (a failure)."""
    monkeypatch.setenv(REQUIRE_ENV, required)
    pytester.syspathinsert(Path(__file__).resolve().parent)
    pytester.makepyfile(textwrap.dedent("""
        import pytest
        from harness.runtimes import need

        @pytest.fixture
        def runtime():
            need(False, "the runtime is missing")

        def test_in_a_fixture(runtime):
            pass

        def test_in_the_test():
            need(False, "the runtime is missing")
    """))
    result = pytester.runpytest("-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function")
    result.assert_outcomes(**outcome)
    assert result.ret == (0 if not required else pytest.ExitCode.TESTS_FAILED)


# -- the LSP client --------------------------------------------------------------------------------------

# A stand-in server: answers every request with its own method (a string id as "id-<id>" where asked), then
# writes what the test put in $OUT_OF_PROTOCOL, and exits at "exit".
SERVER = textwrap.dedent(r"""
    import json, os, sys
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    def write(body):
        out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        out.flush()
    while True:
        length = None
        while (line := inp.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        if length is None:
            break
        message = json.loads(inp.read(length))
        if message.get("method") == "exit":
            break
        if message.get("method") == "junk":
            out.write(os.environ["OUT_OF_PROTOCOL"].encode())
            out.flush()
        if "id" in message:
            ids = [message["id"], "1", True] if message.get("method") == "ids" else [message["id"]]
            for msg_id in ids:
                write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": message["method"]}).encode())
""")


def stand_in(out_of_protocol: str = "") -> LspClient:
    return LspClient([sys.executable, "-c", SERVER], {"OUT_OF_PROTOCOL": out_of_protocol, "PATH": ""})


async def test_answers_are_kept_apart_by_the_exact_id() -> None:
    client = stand_in()
    try:
        assert (await client.call("ids", msg_id=1))["result"] == "ids"
        await client.wait(lambda: client.frames == 3, "all three answers")
        assert [a["id"] for a in client.answers(1)] == [1]  # not "1", not True
        assert [a["id"] for a in client.answers("1")] == ["1"]
        assert client.answers(True) == [] and client.problems == ["bad id True: " + repr(
            b'{"jsonrpc": "2.0", "id": true, "result": "ids"}')]
        pending = client.request("plain")
        assert (await pending)["result"] == "plain" and pending.done()
    finally:
        await client.kill()


def _framed(body: str) -> str:
    return f"Content-Length: {len(body.encode())}\r\n\r\n{body}"


@pytest.mark.parametrize(("junk", "problem"), [
    ("X-Junk\r\n\r\n", "not a header line"),
    ("Content-Length: 2\n\r\n{}", "not a header line"),
    (_framed("abc"), "a body that is not JSON"),
    ("\r\n", "a header block without a usable Content-Length"),
    (_framed('{"jsonrpc": "2.0", "id": 3}'), "exactly one of result and error"),
    (_framed('{"jsonrpc": "2.0", "id": null, "error": {"code": -32601, "message": "?"}}'), "a null id on error"),
])
async def test_output_out_of_protocol_is_a_problem(junk: str, problem: str) -> None:
    """The product reads editors forgivingly; the test client forgives the server nothing."""
    client = stand_in(junk)
    try:
        client.notify("junk")
        assert (await client.call("after"))["result"] == "after"  # and it reads on in step
        assert problem in " ".join(client.problems), client.problems
    finally:
        await client.kill()


async def test_a_wait_ends_when_the_server_is_gone() -> None:
    client = stand_in()
    client.notify("exit")
    with pytest.raises(ConnectionError, match="closed its output"):
        await client.response("never sent")
    assert await client.exited() == 0
    await client.kill()


def test_the_blocking_calls_work_outside_an_event_loop() -> None:
    client = stand_in()
    try:
        assert client.call_sync("stats", msg_id="s")["result"] == "stats"
        client.send_raw(frame({"jsonrpc": "2.0", "id": 5, "method": "five"}))
        assert client.wait_sync(lambda: client.answers(5))[0]["result"] == "five"
        assert client.wait_sync(lambda: client.answers(6), timeout=0.05) == []
    finally:
        client.kill_sync()


def test_well_formed_problem_follows_json_rpc() -> None:
    assert well_formed_problem({"jsonrpc": "2.0", "method": "x"}) is None
    assert well_formed_problem({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "m"}}) is None
    assert "null id" in well_formed_problem({"jsonrpc": "2.0", "id": None, "error": {"code": -32601, "message": "m"}})
    assert "without an id" in well_formed_problem({"jsonrpc": "2.0", "result": 1})
    assert "JSON-RPC 2.0" in well_formed_problem([{"jsonrpc": "2.0", "method": "x"}])


# -- waits -----------------------------------------------------------------------------------------------


async def test_until_returns_the_value_and_times_out_naming_what() -> None:
    values = iter([0, None, "ready"])
    assert await until(lambda: next(values)) == "ready"

    async def later() -> int:
        await asyncio.sleep(0)
        return 7

    assert await until(later) == 7
    with pytest.raises(AssertionError, match="timed out after 0.05 s waiting for the moon"):
        await until(lambda: False, timeout=0.05, what="the moon")


def test_until_sync_times_out_naming_what() -> None:
    assert until_sync(lambda: [1]) == [1]
    with pytest.raises(AssertionError, match="waiting for the sun"):
        until_sync(lambda: 0, timeout=0.05, what="the sun")
