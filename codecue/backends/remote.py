"""A shared inference server, reached by the OpenAI-style ``/v1/completions`` route with ``stream: true``.

vLLM, SGLang, llama.cpp's llama-server, llama-cpp-python's server and Ollama all serve this route and
stream it as server-sent events (``data: {"choices": [{"text": …, "finish_reason": …}]}`` … ``data:
[DONE]``). It is the one route they share, so it is the only one used; its ``suffix`` field is not
honoured everywhere, so callers send a ready FIM prompt.

This module is the transport: settings (``[remote]`` in ``config.toml``), one keep-alive
:class:`httpx.Client`, and :class:`CompletionStream`, which turns one streamed response into text events
with exact deadlines and a :meth:`~CompletionStream.close` that stops it at once. Every failure becomes
one :class:`RemoteError` line that names the server (never the API key) and says what to do.

The response is read on a small thread of its own and handed over through a queue: the caller waits with
a deadline (first byte, then between tokens) instead of blocking in a socket read, and closing the
stream shuts the socket down, so the server sees the client leave and stops generating.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from httpx_sse import EventSource, SSEError

from codecue.errors import CodeCueError
from codecue.options import TABLES, check, check_table
from codecue.paths import config_path, read_config_table

log = logging.getLogger(__name__)

COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
MAX_ERROR_BODY = 64 * 1024  # bytes read from an error response: enough for any message, bounded
_END = object()  # the response body ended


class RemoteError(CodeCueError):
    """The remote server could not give a completion; the message names the server and the cause."""


@dataclass(frozen=True)
class RemoteSettings:
    """``[remote]`` in ``config.toml`` (``--remote URL`` overrides ``url``)."""

    url: str
    model: str | None = None  # sent as "model"; None = the server's only or default model
    api_key_env: str | None = None  # the NAME of the environment variable that holds the key
    connect_timeout: float = 3.0  # seconds to open the connection (TCP and TLS)
    first_byte_timeout: float = 10.0  # seconds from sending the request to the first token
    read_timeout: float = 5.0  # the longest silence between two tokens once streaming
    fallback: str = "local"  # local: a failing remote is answered by the local model; none: an error
    retry_after: float = 30.0  # after a failure with fallback = "local", use the local model this long
    ca_bundle: str | None = None  # a PEM file of CAs to trust (a team's own CA); TLS is always verified
    tokenizer: str | None = None  # model whose tokenizer trims the prompt; None = the local target

    @classmethod
    def load(cls, url: str | None = None, table: Mapping[str, Any] | None = None) -> RemoteSettings:
        """Settings from ``table`` (default: the user's ``[remote]``), with ``url`` over its ``url``. A bad
        or unknown entry stops here, with the message its option gets everywhere (a server the user set
        up wrong is not worked around: the completion would go elsewhere than they think)."""
        table = dict(read_config_table("remote") if table is None else table)
        where = f"[remote] in {config_path()}"
        if url is not None:
            table["url"] = url
        values, problems = check_table("remote", table)
        if problems:
            raise CodeCueError(f"{problems[0]} (in {config_path()})")
        if not values.get("url"):
            raise CodeCueError("no remote server configured", f"pass --remote URL or set url in {where}")
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CodeCueError(f"remote url {self.display_url!r} is not an http(s) URL",
                               "use e.g. https://gpu-box.example:8000 (the server's base URL)")
        check(TABLES["remote"]["fallback"], self.fallback)
        if self.ca_bundle is not None and not os.path.isfile(os.path.expanduser(self.ca_bundle)):
            raise CodeCueError(f"[remote] ca_bundle {self.ca_bundle} is not a file")

    @property
    def display_url(self) -> str:
        """The URL as messages show it: without user:password and without a query."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))

    def endpoint(self, path: str) -> str:
        """``path`` under the base URL; a base that already ends in ``/v1`` is not doubled."""
        base = self.url.rstrip("/")
        if base.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        return base + path

    def api_key(self) -> str | None:
        """The key, read from the environment when a request is made; it is kept nowhere else."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise RemoteError(f"[remote] api_key_env names {self.api_key_env}, which is not set",
                              f"export {self.api_key_env}=<key> before starting CodeCue")
        return key


@dataclass(frozen=True)
class TextEvent:
    """One streamed chunk: the new text (usually one token's) and, on the last one, why it ended."""

    text: str
    finish_reason: str | None = None


def redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret and len(secret) >= 4 else text


def error_message(body: bytes) -> str:
    """The human part of an error body: OpenAI's ``error.message``, vLLM's ``message``, FastAPI's
    ``detail``, else the text itself (shortened)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for candidate in (data.get("error"), data):
            if isinstance(candidate, dict):
                for key in ("message", "detail"):
                    value = candidate.get(key)
                    if isinstance(value, str) and value.strip():
                        text = value.strip()
                        break
                    if value is not None and key == "detail":
                        text = json.dumps(value)
                        break
                else:
                    continue
                break
        else:
            if isinstance(data.get("error"), str):
                text = data["error"]
    text = " ".join(text.split())
    return text[:300] + ("…" if len(text) > 300 else "") if text else "(empty body)"


def parse_event(data: str) -> TextEvent:
    """One ``data:`` payload of a completions stream."""
    try:
        chunk = json.loads(data)
    except ValueError:
        raise ValueError(f"an event is not JSON: {data[:80]!r}") from None
    if isinstance(chunk, dict) and "error" in chunk:
        raise ValueError(f"the server reported an error mid-stream: {error_message(data.encode())}")
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    if not isinstance(choices, list):
        raise ValueError(f"an event has no choices: {data[:80]!r}")
    if not choices:  # a usage-only chunk
        return TextEvent("")
    choice = choices[0]
    text = choice.get("text") if isinstance(choice, dict) else None
    if not isinstance(text, str):
        raise ValueError(f"an event's choice has no text: {data[:80]!r}")
    reason = choice.get("finish_reason")
    return TextEvent(text, reason if isinstance(reason, str) else None)


class RemoteClient:
    """One keep-alive connection pool to the server; thread-safe (httpx's client is)."""

    def __init__(self, settings: RemoteSettings, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        # Socket reads may block a little longer than the caller's deadlines, which fire first; the
        # reading thread then ends on its own.
        read = max(settings.first_byte_timeout, settings.read_timeout) + 5.0
        verify: Any = os.path.expanduser(settings.ca_bundle) if settings.ca_bundle else True
        self._http = httpx.Client(
            timeout=httpx.Timeout(connect=settings.connect_timeout, read=read, write=settings.connect_timeout,
                                  pool=settings.connect_timeout),
            verify=verify, transport=transport, follow_redirects=False,
            limits=httpx.Limits(max_keepalive_connections=4, keepalive_expiry=60.0),
            headers={"User-Agent": "codecue"})

    def close(self) -> None:
        self._http.close()

    def _headers(self) -> tuple[dict[str, str], str | None]:
        key = self.settings.api_key()
        return ({"Authorization": f"Bearer {key}"} if key else {}), key

    def stream_completion(self, body: dict[str, Any]) -> CompletionStream:
        headers, key = self._headers()
        return CompletionStream(self, body, headers, key)

    def models(self) -> list[str] | None:
        """The model ids the server lists, or None when it does not say (used to explain a 404)."""
        headers, _ = self._headers()
        try:
            response = self._http.get(self.settings.endpoint(MODELS_PATH), headers=headers, timeout=3.0)
            data = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            return None
        return [m["id"] for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]

    # -- errors --------------------------------------------------------------------------------------
    def transport_error(self, exc: BaseException, key: str | None) -> RemoteError:
        url = self.settings.display_url
        detail = redact(str(exc) or type(exc).__name__, key)
        if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
            return RemoteError(f"connecting to {url} timed out after {self.settings.connect_timeout:g} s",
                               "is the server up and reachable? [remote] connect_timeout sets the limit")
        if isinstance(exc, httpx.ConnectError):
            if "CERTIFICATE_VERIFY_FAILED" in detail or "certificate" in detail.lower():
                return RemoteError(f"the TLS certificate of {url} could not be verified ({detail})",
                                   "set [remote] ca_bundle to your team's CA file")
            if "refused" in detail.lower():
                return RemoteError(f"cannot connect to {url}: connection refused",
                                   "is the inference server running on that port?")
            return RemoteError(f"cannot connect to {url}: {detail}", "check [remote] url")
        if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.ReadTimeout):
            return RemoteError(f"{url} broke off the response ({detail})", "check the server's log")
        if isinstance(exc, SSEError):
            return RemoteError(f"{url} did not answer with an event stream ({detail})",
                               f"is {url} an OpenAI-compatible server (it must serve {COMPLETIONS_PATH})?")
        return RemoteError(f"request to {url} failed: {detail}")

    def http_error(self, status: int, body: bytes, key: str | None) -> RemoteError:
        url = self.settings.display_url
        message = redact(error_message(body), key)
        model = self.settings.model
        if status in (400, 404) and (status == 404 or "model" in message.lower()):
            if model is not None or "model" in message.lower():
                listed = self.models()
                fix = (f"set [remote] model to one it serves: {', '.join(listed)}" if listed
                       else "set [remote] model to a model the server serves")
                name = f"model {model!r}" if model else "the requested model"
                return RemoteError(f"{url} does not serve {name} (HTTP {status}: {message})", fix)
        if status in (401, 403):
            fix = (f"check the key in ${self.settings.api_key_env}" if self.settings.api_key_env
                   else "set [remote] api_key_env to the variable that holds the key")
            return RemoteError(f"{url} refused the request (HTTP {status}: {message})", fix)
        if status == 404:
            return RemoteError(f"{url} has no {COMPLETIONS_PATH} (HTTP 404: {message})",
                               "set [remote] url to the server's base URL")
        return RemoteError(f"{url} answered HTTP {status}: {message}")


class CompletionStream:
    """One streamed completion. Iterate :meth:`events`; :meth:`close` ends it (and the connection) now."""

    def __init__(self, client: RemoteClient, body: dict[str, Any], headers: dict[str, str],
                 key: str | None) -> None:
        self._client = client
        self._key = key
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._done = False  # the server said the completion is complete: keep the connection
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(body, headers), daemon=True,
                                        name="codecue-remote-stream")
        self._thread.start()

    # -- the reading thread --------------------------------------------------------------------------
    def _read(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        settings = self._client.settings
        try:
            with self._client._http.stream("POST", settings.endpoint(COMPLETIONS_PATH), json=body,
                                           headers={**headers, "Accept": "text/event-stream"}) as response:
                self._remember_socket(response)
                if self._closed.is_set():
                    return
                if response.status_code >= 400:
                    self._queue.put(self._client.http_error(response.status_code, _read_capped(response),
                                                            self._key))
                    return
                for sse in EventSource(response).iter_sse():
                    if self._closed.is_set():
                        return
                    self._queue.put(sse.data)
                # Read to the end so the connection goes back to the pool for the next request.
            self._queue.put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, who words it
            if not self._closed.is_set():
                self._queue.put(exc)

    def _remember_socket(self, response: httpx.Response) -> None:
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._lock:
            self._socket = sock if isinstance(sock, socket.socket) else None
            if self._closed.is_set():
                self._shutdown_socket()

    def _shutdown_socket(self) -> None:
        if self._socket is not None:
            try:
                self._socket.shutdown(socket.SHUT_RDWR)  # wakes the reading thread; the server sees EOF
            except OSError:
                pass

    # -- the caller ----------------------------------------------------------------------------------
    def events(self) -> Iterator[TextEvent]:
        """Text events until the server says the completion is done; raises :class:`RemoteError` on a
        failure, a deadline passed, or a stream that ends before it says so."""
        settings = self._client.settings
        url = settings.display_url
        timeout, waiting_for = settings.first_byte_timeout, "the first token"
        finished = False
        while True:
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                self.close()
                name = "first_byte_timeout" if waiting_for == "the first token" else "read_timeout"
                raise RemoteError(f"{url} sent nothing for {timeout:g} s while CodeCue waited for {waiting_for}",
                                  f"the server is overloaded or stuck; if it is only slow, raise [remote] {name}"
                                  ) from None
            if item is _END:
                if not finished:
                    raise RemoteError(f"{url} ended the event stream before the completion was done",
                                      "check the server's log (it may have crashed or restarted)")
                self._done = True
                return
            if isinstance(item, RemoteError):
                raise item
            if isinstance(item, BaseException):
                raise self._client.transport_error(item, self._key) from None
            if item.strip() == "[DONE]":
                self._done = True  # the reading thread finishes the body; the connection is reused
                return
            try:
                event = parse_event(item)
            except ValueError as exc:
                self.close()
                raise RemoteError(f"{url} sent a malformed event stream: {redact(str(exc), self._key)}",
                                  f"is {url} an OpenAI-compatible server?") from None
            finished = finished or event.finish_reason is not None
            yield event
            timeout, waiting_for = settings.read_timeout, "the next token"

    def close(self) -> None:
        """Stop reading and drop the connection; the server sees the client leave and stops generating."""
        with self._lock:
            if self._closed.is_set() or self._done:
                return
            self._closed.set()
            self._shutdown_socket()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()


def _read_capped(response: httpx.Response) -> bytes:
    out = bytearray()
    for chunk in response.iter_bytes():
        out += chunk
        if len(out) >= MAX_ERROR_BODY:
            break
    return bytes(out[:MAX_ERROR_BODY])


def choose_remote_url(flag: str | None, backend: str | None, no_remote: bool = False) -> str | None:
    """The server a command uses: ``--remote URL``; else ``[remote] url`` from the config, unless a local
    backend was named (``--backend llamacpp``) or ``--no-remote`` given; ``--backend remote`` needs one."""
    if no_remote:
        if backend == "remote":
            raise CodeCueError("--backend remote and --no-remote contradict each other")
        return None
    if flag:
        return flag
    if backend not in (None, "auto", "remote"):
        return None
    url = read_config_table("remote").get("url")
    if isinstance(url, str) and url.strip():
        return url.strip()
    if backend == "remote":
        raise CodeCueError("--backend remote needs a server", f"pass --remote URL or set url under [remote] in "
                                                               f"{config_path()}")
    return None
