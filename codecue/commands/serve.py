"""``codecue serve``: run the language server.

- ``--stdio`` (the default; what editors spawn): relay to the per-user daemon, starting it if needed.
- ``--in-process``: load the models in this process and serve stdio directly (no daemon).
- ``--tcp HOST:PORT``: serve in this process on a loopback address, one session per connection, for
  debugging. A connection must send the token printed at start (and written to the runtime dir) as
  ``initializationOptions.token``.
"""

from __future__ import annotations

import argparse
import logging

from codecue.commands.common import (
    add_model_arguments,
    config_from_args,
    given_model_flags,
    given_model_values,
)
from codecue.errors import CodeCueError

log = logging.getLogger(__name__)


def add_server_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model flags (a flag not given means the daemon's configured default) and where the models live;
    shared by ``serve`` and ``daemon start``."""
    add_model_arguments(parser, unset_is_none=True)
    parser.add_argument("--inline-models", action="store_true",
                        help="hold the models in the server's own process (default: a child process, so that "
                             "a crash in native code fails one request instead of ending the server)")


def model_factory(args: argparse.Namespace):  # -> CompleterFactory
    if getattr(args, "inline_models", False):
        from codecue.server.worker.model_worker import load_completer

        return load_completer
    from codecue.server.worker.model_process import child_process_factory

    return child_process_factory()


def started_model_factory(args: argparse.Namespace):  # -> CompleterFactory
    """:func:`model_factory`, its first model process started at once: before the server's own imports
    (pygls and the rest: about half a second on 2 cores), which it overlaps, since its interpreter and the
    engine's imports are the longest part of a cold start. Call it first thing."""
    factory = model_factory(args)
    prestart = getattr(factory, "prestart", None)
    if prestart is not None:
        prestart()
    return factory


def daemon_flags(args: argparse.Namespace) -> list[str]:
    """The flags the user gave, to pass on to a daemon this command starts."""
    return given_model_flags(args) + (["--inline-models"] if getattr(args, "inline_models", False) else [])


def model_config(args: argparse.Namespace):  # -> CompletionConfig, with the remote server chosen
    from dataclasses import replace

    from codecue.backends.remote import choose_remote_url

    config = config_from_args(args)
    remote = choose_remote_url(args.remote, args.backend, args.no_remote)
    return replace(config, models=replace(config.models, remote=remote))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true",
                      help="speak LSP on stdin/stdout through the per-user daemon (default)")
    mode.add_argument("--tcp", metavar="HOST:PORT", help="listen on a loopback address (debugging)")
    parser.add_argument("--in-process", action="store_true",
                        help="load the models in this process instead of using the daemon")
    add_server_model_arguments(parser)
    parser.add_argument("--idle-timeout", type=float, default=900.0, metavar="SECONDS",
                        help="unload the models after this long without a request (0 = never; default 900)")


def run(args: argparse.Namespace) -> int:
    if args.tcp:
        return run_tcp(args)
    if args.in_process:
        return run_in_process_stdio(args)
    from codecue.server.daemon.relay import run_relay

    model = given_model_values(args)
    if args.no_remote:
        model["remote"] = ""  # the daemon's default may be remote; this session is not
    return run_relay(daemon_flags(args), model)


def run_in_process_stdio(args: argparse.Namespace) -> int:
    import asyncio

    factory = started_model_factory(args)
    from codecue.server.daemon.streams import serve_stdio
    from codecue.server.lsp.session import CodeCueServer
    from codecue.server.worker.model_worker import ModelWorker

    worker = ModelWorker(model_config(args), factory, idle_unload_s=args.idle_timeout)
    try:
        return asyncio.run(serve_stdio(CodeCueServer(worker)))
    finally:
        worker.shutdown(timeout=2.0)


def run_tcp(args: argparse.Namespace) -> int:
    import asyncio
    import secrets
    import sys

    from codecue.paths import atomic_write_text
    from codecue.server.daemon.client import ensure_runtime_dir
    from codecue.server.daemon.streams import parse_host_port, serve_session
    from codecue.server.lsp.session import CodeCueServer
    from codecue.server.wire.framing import STREAM_LIMIT
    from codecue.server.worker.model_worker import ModelWorker

    host, port = parse_host_port(args.tcp)
    worker = ModelWorker(model_config(args), model_factory(args), idle_unload_s=args.idle_timeout)
    token = secrets.token_hex(16)

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await serve_session(CodeCueServer(worker, require_token=token), reader, writer)
        finally:
            writer.close()

    async def main() -> None:
        try:
            server = await asyncio.start_server(on_connection, host, port, limit=STREAM_LIMIT)
        except OSError as exc:
            raise CodeCueError(f"cannot listen on {host}:{port}: {exc.strerror}", "pick another port") from None
        bound = server.sockets[0].getsockname()
        token_file = ensure_runtime_dir() / f"tcp-{bound[1]}.token"
        atomic_write_text(token_file, token + "\n", mode=0o600)
        print(f"codecue: serving LSP on {bound[0]}:{bound[1]} (loopback only); send "
              f'"initializationOptions": {{"token": "{token}"}} (also in {token_file})', file=sys.stderr, flush=True)
        try:
            async with server:
                await server.serve_forever()
        finally:
            token_file.unlink(missing_ok=True)

    try:
        asyncio.run(main())
    finally:
        worker.shutdown(timeout=2.0)
    return 0
