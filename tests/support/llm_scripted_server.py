"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1 (stdlib http.server in a thread).

Each POST /v1/chat/completions takes the next step of its script: a chat.completion reply (with tool calls and
usage), an HTTP error (with an optional Retry-After), or a reply after a delay. When the script runs out, every
request gets the ``forever`` step if there is one (or, for a callable, what it makes of the request's body); else it
waits until the server closes (then gets 503), so an agent past its transcript stays quiet instead of retrying.
Each request is kept with its body and its size in bytes.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable
from typing import Any


@dataclass
class Step:
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def completion(content: str | None = None, tool_calls: list[dict] | None = None, *, usage=(100, 20),
               finish_reason: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
        "model": "scripted", "system_fingerprint": "fp_scripted",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def call(name: str, arguments: dict | str | None = None) -> dict[str, Any]:
    """One tool call; ``arguments`` as a dict (JSON-encoded here) or raw text (sent as is, e.g. malformed)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
    return {"id": f"call_{uuid.uuid4().hex[:10]}", "type": "function", "function": {"name": name, "arguments": text}}


def tools(*calls: dict, usage=(100, 20)) -> Step:
    return Step(body=completion(None, list(calls), usage=usage))


def text(content: str, usage=(100, 20)) -> Step:
    return Step(body=completion(content, usage=usage))


def error(status: int, message: str = "scripted error", retry_after: float | None = None) -> Step:
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
    return Step(status=status, body={"error": {"message": message, "type": "server_error", "code": None}},
                headers=headers)


def slow(step: Step, delay_s: float) -> Step:
    return Step(step.status, step.body, step.headers, delay_s)


class ScriptedServer:
    def __init__(self, script: list[Step], *, reject_tools: bool = False,
                 forever: Step | Callable[[dict], Step] | None = None):
        self.script = list(script)
        self.reject_tools = reject_tools
        self.forever = forever
        # {"body": ..., "bytes": size of the body, "authorization": ..., "at": time.monotonic() on arrival,
        #  "step": index, "rejected" or "forever"}
        self.requests: list[dict[str, Any]] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self.in_flight = 0
        self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"unparsed": raw.decode(errors="replace")}
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                step = server._take(body, len(raw), self.headers.get("authorization"))
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if step is None:
                        server.closing.wait(60)
                        return self._send(503, {"error": {"message": "script exhausted"}})
                    if step.delay_s:
                        server.closing.wait(step.delay_s)
                    self._send(step.status, step.body or {}, step.headers)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _send(self, status: int, body: dict, headers: dict[str, str] | None = None):
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="scripted-llm", daemon=True)

    def _take(self, body: dict, size: int, authorization: str | None) -> Step | None:
        with self._lock:
            record = {"body": body, "bytes": size, "authorization": authorization, "at": time.monotonic()}
            if self.reject_tools and body.get("tools"):
                self.requests.append({**record, "step": "rejected"})
                return error(400, "tools are not supported by this server (no tool parser)")
            index = self._next
            if index >= len(self.script):
                self.requests.append({**record, "step": "forever" if self.forever is not None else index})
                return self.forever(body) if callable(self.forever) else self.forever
            self.requests.append({**record, "step": index})
            self._next += 1
            return self.script[index]

    def usage_sent(self) -> int:
        """Tokens the server reported in the usage of the replies it was asked for (what it would bill)."""
        with self._lock:
            steps = [self.script[r["step"]] if isinstance(r["step"], int) and r["step"] < len(self.script)
                     else self.forever if r["step"] == "forever" and not callable(self.forever) else None
                     for r in self.requests]
        return sum((s.body or {}).get("usage", {}).get("total_tokens", 0) for s in steps
                   if s is not None and s.status == 200)

    @property
    def consumed(self) -> int:
        with self._lock:
            return self._next

    @property
    def done(self) -> bool:
        return self.consumed >= len(self.script)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()
