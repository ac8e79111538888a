"""``codecue daemon start | stop | status``: the per-user daemon that holds the models for every editor.

``start`` detaches a daemon (or, with ``--foreground``, runs it here) listening on a Unix socket (0600)
in the runtime dir; ``stop`` asks it to exit; ``status`` prints what it holds (exit code 3 when none
runs). Editors never need these: ``codecue serve --stdio`` starts the daemon on demand.
"""

from __future__ import annotations

import argparse
import json
import sys

from codecue.commands.serve import (
    add_server_model_arguments,
    daemon_flags,
    model_config,
    started_model_factory,
)

NOT_RUNNING = 3  # as `systemctl status` says for a stopped unit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="daemon_command", metavar="ACTION", required=True)
    start = sub.add_parser("start", help="start the daemon (detached unless --foreground)")
    add_server_model_arguments(start)
    start.add_argument("--idle-timeout", type=float, default=900.0, metavar="SECONDS",
                       help="unload the models after this long without a request (0 = never; default 900)")
    start.add_argument("--foreground", action="store_true", help="run in this process (logs to stderr)")
    sub.add_parser("stop", help="stop the daemon")
    status = sub.add_parser("status", help="show whether it runs, its models and sessions")
    status.add_argument("--json", action="store_true", help="print the status as JSON")


def run(args: argparse.Namespace) -> int:
    from codecue.server.daemon import client as daemon_client

    if args.daemon_command == "start":
        flags = daemon_flags(args) + ["--idle-timeout", str(args.idle_timeout)]
        if args.foreground:
            import logging

            factory = started_model_factory(args)  # a relay started this daemon: an editor's initialize follows
            from codecue.server.daemon.service import run_daemon

            logging.getLogger("codecue").setLevel(min(logging.getLogger().level, logging.INFO))
            return run_daemon(model_config(args), args.idle_timeout, factory)
        started = daemon_client.ensure_running(flags)
        info = daemon_client.control("status") or {}
        what = "started" if started else "already running"
        print(f"codecue daemon {what} (pid {info.get('pid')}, socket {daemon_client.socket_path()})")
        return 0

    if args.daemon_command == "stop":
        if daemon_client.stop():
            print("codecue daemon stopped")
        else:
            print("codecue daemon is not running")
        return 0

    info = daemon_client.control("status")
    if info is None:
        if args.json:
            print(json.dumps({"running": False, "socket": str(daemon_client.socket_path())}))
        else:
            print(f"codecue daemon is not running (socket {daemon_client.socket_path()})")
        return NOT_RUNNING
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    worker = info.get("worker", {})
    model = worker.get("model") or worker.get("defaultModel") or {}
    loaded = "loaded" if worker.get("modelsLoaded") else "not loaded (they load on the first request)"
    lines = [
        f"codecue daemon running: pid {info.get('pid')}, up {info.get('uptimeSeconds')} s, version {info.get('version')}",
        f"  socket   {info.get('socket')}",
        f"  sessions {info.get('sessions')} open, {info.get('connectionsTotal')} since start",
        f"  models   {loaded}: target {model.get('target') or 'default'}, draft {model.get('draft') or 'default'}, "
        f"backend {model.get('backend')}",
        f"  work     {worker.get('generations')} generations, idle {worker.get('idleSeconds')} s "
        f"(unload after {worker.get('idleUnloadSeconds')} s), max RSS {info.get('maxRssMB')} MB",
    ]
    print("\n".join(lines), file=sys.stdout)
    return 0
