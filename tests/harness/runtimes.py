"""What a test needs from the machine: a real runtime (skip without it, or fail when it is required), or
hardware (skip without it, always).

``scripts/test.sh`` sets ``CODECUE_REQUIRE_REAL_MODELS``: there, a test whose runtime is missing (the
patched llama.cpp build failed, the real model pair was not pulled, Neovim is not installed) fails instead
of skipping, so a broken set-up turns the run red rather than leaving it green with skips.
"""

from __future__ import annotations

import functools
import os

import pytest

REQUIRE_ENV = "CODECUE_REQUIRE_REAL_MODELS"


def required() -> bool:
    """Whether a missing runtime fails the tests that need it (any non-empty value, as scripts/test.sh sets)."""
    return bool(os.environ.get(REQUIRE_ENV))


def need(available: bool, reason: str) -> None:
    """Return when a runtime the test needs is here: llama.cpp, the real model pair, Neovim, llama-cpp-python's
    server, exllamav2 on a CUDA machine. Otherwise skip the test with ``reason``, or fail it when
    ``CODECUE_REQUIRE_REAL_MODELS`` is set. Called in a fixture, the failure is an error at set-up.

    Not for hardware: a GPU test (marker ``gpu``: CUDA, exllamav2) or one for a CPU feature (AMX) uses
    :func:`need_hardware` and still skips on a machine without it, also in CI, which has no GPU: no set-up
    step can add one, so its absence is not a broken build.
    """
    __tracebackhide__ = True  # a skip or failure is reported at the test's line, not here
    if available:
        return
    if required():
        pytest.fail(f"{reason} ({REQUIRE_ENV} is set: the tests that need it must run, not skip)", pytrace=False)
    pytest.skip(reason)


def need_hardware(available: bool, reason: str) -> None:
    """Skip the test with ``reason`` unless the hardware it runs on is here (a CUDA GPU, a CPU feature),
    whether or not ``CODECUE_REQUIRE_REAL_MODELS`` is set: see :func:`need`."""
    __tracebackhide__ = True
    if not available:
        pytest.skip(reason)


@functools.cache
def llama_cpp_problem() -> str | None:
    """Why CodeCue's llama.cpp backend cannot load llama-cpp-python here, or None when it can."""
    from codecue.backends import llamacpp
    from codecue.errors import BackendUnavailable

    try:
        llamacpp._load_lib()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def need_llama_cpp() -> None:
    """:func:`need` for the llama.cpp runtime (llama-cpp-python, built by scripts/setup.sh)."""
    __tracebackhide__ = True
    problem = llama_cpp_problem()
    need(problem is None, f"llama.cpp unavailable: {problem}")



def need_llama_server() -> None:
    """:func:`need` for llama.cpp's llama-server of the CPU class served (scripts/build_llama_server.sh)."""
    __tracebackhide__ = True
    from codecue.backends.cpu_class import server_binary

    need(server_binary().is_file(), f"llama-server is not built ({server_binary()}; bash scripts/build_llama_server.sh)")
