"""``initialize`` (options, model check), ``shutdown`` and ``exit``.

``initialize`` validates ``initializationOptions`` once (see :mod:`codecue.server.lsp.options`); problems,
including a model reference that does not resolve, are reported in one ``window/showMessage`` (LSP allows
that during ``initialize``) and the defaults are used. ``initialize`` is answered at once; the session's
models start loading in the background then (:meth:`ModelWorker.preload`), so the first completion does not
pay for the load the editor's start-up could hide; a shared daemon loads them once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from codecue.errors import CodeCueError
from codecue.server.lsp.options import ModelOptions, ServerOptions, parse_options

if TYPE_CHECKING:
    from codecue.server.lsp.session import CodeCueServer

log = logging.getLogger(__name__)


def check_models(model: ModelOptions) -> tuple[ModelOptions, list[str]]:
    """Resolve the models the client named (cheap checks, no loading); unusable ones fall back."""
    from codecue.models.resolve import resolve_model

    problems = []
    checked: dict[str, str | None] = {"target": model.target, "draft": model.draft}
    for role in ("target", "draft"):
        ref = checked[role]
        if ref is None:
            continue
        try:
            resolve_model(ref, role)  # type: ignore[arg-type]
        except CodeCueError as exc:
            problems.append(f"model.{role}: {exc}; using the default {role}")
            checked[role] = None
        except Exception as exc:  # noqa: BLE001 - an unexpected resolver failure is still just a bad option
            problems.append(f"model.{role}: cannot use {ref!r} ({exc}); using the default {role}")
            checked[role] = None
    return ModelOptions(**checked), problems


async def configure(server: CodeCueServer, raw_options: Any) -> ServerOptions:
    options, problems = parse_options(raw_options)
    problems = server.config_problems + problems
    if options.model.target or options.model.draft:
        model, model_problems = await asyncio.to_thread(check_models, options.model)
        options = replace(options, model=model)
        problems += model_problems
    server.options = options
    if problems:
        for problem in problems:
            log.warning("settings: %s", problem)
        server.show_message("CodeCue: " + "; ".join(problems), types.MessageType.Warning)
    return options


def register(server: CodeCueServer) -> None:
    @server.feature(types.INITIALIZE)
    async def on_initialize(params: types.InitializeParams) -> None:
        await configure(server, params.initialization_options)
        server.worker.preload(server.completion_config)

    @server.feature(types.SHUTDOWN)
    def on_shutdown(params: Any) -> None:
        server.completions.close()
