"""A scriptable OpenAI-compatible HTTP server on 127.0.0.1 (the LLM tests' loopback server)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A behaviour gets (parsed request body, 1-based count of requests with this last user message)
# and returns (status, body text, seconds to wait before answering).
Behaviour = Callable[[dict[str, Any], int], tuple[int, str, float]]


def completion_body(text: str, usage: dict[str, int] | None = None) -> str:
    body: dict[str, Any] = {"id": "cmpl-test", "model": "fake-model", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return json.dumps(body)


def echo(body: dict[str, Any], count: int) -> tuple[int, str, float]:
    """Answers ``echo: <last message>`` with fixed usage counts."""
    last = body["messages"][-1]["content"]
    return 200, completion_body(f"echo: {last}", {"prompt_tokens": 11, "completion_tokens": 3}), 0.0


@dataclass
class FakeServer:
    url: str
    behaviour: Behaviour = echo
    bodies: list[dict[str, Any]] = field(default_factory=list)
    authorization: list[str | None] = field(default_factory=list)  # each request's header
    counts: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests_for(self, content: str) -> int:
        with self.lock:
            return self.counts.get(content, 0)


def _handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output quiet
            return

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            last = body["messages"][-1]["content"]
            with server.lock:
                server.bodies.append(body)
                server.authorization.append(self.headers.get("Authorization"))
                server.counts[last] = server.counts.get(last, 0) + 1
                count = server.counts[last]
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
            try:
                status, text, delay = server.behaviour(body, count)
                time.sleep(delay)
                payload = text.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up: nothing left to answer
            finally:
                with server.lock:
                    server.in_flight -= 1

    return Handler


@contextmanager
def serve(behaviour: Behaviour = echo) -> Iterator[FakeServer]:
    """A threaded OpenAI-compatible server; set ``.behaviour`` to script its answers."""
    state = FakeServer(url="", behaviour=behaviour)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def run_sample_on_loopback(tmp_path: Any, monkeypatch: Any, behaviour: Behaviour,
                           *overrides: str) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
    """One run of the shipped sample (hashing embedder, LLM extraction) against a loopback
    server answering with ``behaviour``; returns (config, metrics, request bodies)."""
    from test_configs import make_cfg

    from synapse_pt.commands.run import run

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    with serve(behaviour) as server:
        cfg = make_cfg("dataset=sample", "embedder=hashing", "logger=none", "device=cpu",
                       "llm=openai", "extractor=llm", f"llm.backend.base_url={server.url}",
                       "llm.backend.max_retries=0", f"paths.cache_dir={tmp_path / 'cache'}",
                       *overrides, output_dir=str(tmp_path / "run"))
        metrics = run(cfg)
        bodies = list(server.bodies)
    return cfg, metrics, bodies
