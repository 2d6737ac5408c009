"""Reusable loopback HTTP servers for tests: real sockets on 127.0.0.1, ephemeral ports.

Both servers run in a background thread and are context managers; they never listen on
anything but 127.0.0.1, so tests that use them send no traffic off the machine.

``ReplayChatServer(replies)``: an OpenAI-compatible ``/v1/chat/completions`` server that answers
with scripted replies in the real ``chat.completion`` shape and records every request.
Each reply is one of:

- a string: the assistant's ``content``;
- a dict with ``"status"``: a scripted HTTP response, e.g. ``{"status": 500}``,
  ``{"status": 429, "headers": {"Retry-After": "1"}}``, ``{"status": 401, "body": {...}}``;
- a dict with ``"raw"``: that JSON body sent as-is with status 200
  (e.g. ``{"raw": {"choices": []}}``);
- any other dict: fields of the assistant message (``content``, ``reasoning_content``,
  ``tool_calls``) plus optional ``usage`` and ``finish_reason`` for the response;
- a callable: called with the request's JSON body, returns any of the above.

Options: ``models`` (requests for another model get vLLM's 404 "model does not exist"),
``api_key`` (requests without ``Authorization: Bearer <api_key>`` get 401) and ``prefix``
(default ``/v1``; other paths get 404, as on a real server).

``MisbehavingServer(plan)``: answers request ``i`` with ``plan[i]`` (then ``then`` for every
later request). A step is an int (that status, JSON body), ``"ok"`` (200, JSON), ``"malformed"``
(200, broken JSON), ``"truncate"`` (announces more bytes than it sends, then closes), ``"hang"``
(accepts and never answers until the test ends), ``"reset"`` (closes without answering),
``"slow"`` (answers after ``slow_s``), or a dict with any of ``status``, ``headers``, ``json``,
``body``, ``delay``, ``truncate``, ``hang``, ``reset``, ``drip`` (send the body one byte every
``drip`` seconds).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Any  # str | dict | Callable[[dict], str | dict]


class _LoopbackServer:
    """Shared machinery: bind 127.0.0.1:0, serve in a thread, release hung handlers on exit."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection keeps the plans simple

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:
                outer._dispatch(self, "GET")

            def do_POST(self) -> None:
                outer._dispatch(self, "POST")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "_LoopbackServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _dispatch(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        raise NotImplementedError

    @staticmethod
    def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
        length = int(handler.headers.get("Content-Length") or 0)
        return handler.rfile.read(length) if length else b""

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler,
        status: int,
        body: bytes | str | dict | list | None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if isinstance(body, (dict, list)):
            payload, ctype = json.dumps(body).encode(), "application/json"
        elif isinstance(body, str):
            payload, ctype = body.encode(), "text/plain; charset=utf-8"
        else:
            payload, ctype = body or b"", "application/octet-stream"
        handler.send_response(status)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)


def approx_tokens(text: str) -> int:
    """A crude token count (whitespace words) for the fake server's usage numbers."""
    return len(text.split())


def _message_text(messages: list[dict]) -> str:
    parts: list[str] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return " ".join(parts)


class ReplayChatServer(_LoopbackServer):
    """See the module docstring. ``base_url`` is what a client is configured with (``.../v1``);
    ``requests`` holds ``{"path", "headers", "json"}`` for every request received."""

    def __init__(
        self,
        replies: list[Reply],
        *,
        models: list[str] | None = None,
        api_key: str | None = None,
        prefix: str = "/v1",
    ):
        super().__init__()
        self.prefix = prefix.rstrip("/")
        self.replies = list(replies)
        self.models = models
        self.api_key = api_key
        self.requests: list[dict] = []

    @property
    def base_url(self) -> str:
        return self.url + self.prefix

    def _dispatch(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        raw = self._read_body(handler)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        with self._lock:
            self.requests.append(
                {"path": handler.path, "headers": dict(handler.headers.items()), "json": body}
            )
        if (
            self.api_key is not None
            and handler.headers.get("Authorization") != f"Bearer {self.api_key}"
        ):
            self._send(
                handler,
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided.",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
            return
        path = handler.path.split("?", 1)[0].rstrip("/")
        if method == "GET" and path == f"{self.prefix}/models":
            self._send(
                handler,
                200,
                {
                    "object": "list",
                    "data": [{"id": m, "object": "model"} for m in self.models or []],
                },
            )
            return
        if method != "POST" or path != f"{self.prefix}/chat/completions":
            self._send(handler, 404, {"detail": "Not Found"})
            return
        model = body.get("model")
        if self.models is not None and model not in self.models:
            self._send(
                handler,
                404,
                {
                    "error": {
                        "message": f"The model `{model}` does not exist.",
                        "type": "NotFoundError",
                        "code": 404,
                    }
                },
            )
            return
        with self._lock:
            reply = self.replies.pop(0) if self.replies else None
        if reply is None:
            self._send(
                handler, 500, {"error": {"message": "ReplayChatServer: no scripted replies left"}}
            )
            return
        if callable(reply):
            reply = reply(body)
        self._answer(handler, body, reply)

    def _answer(self, handler: BaseHTTPRequestHandler, request: dict, reply: Any) -> None:
        if isinstance(reply, dict) and "status" in reply:
            self._send(
                handler,
                int(reply["status"]),
                reply.get("body", {"error": {"message": f"scripted {reply['status']}"}}),
                reply.get("headers"),
            )
            return
        if isinstance(reply, dict) and "raw" in reply:
            self._send(handler, 200, reply["raw"])
            return
        fields = {"content": reply} if isinstance(reply, str) else dict(reply)
        usage = fields.pop("usage", None)
        finish = fields.pop("finish_reason", "stop")
        message = {"role": "assistant", **fields}
        if usage is None:
            prompt = approx_tokens(_message_text(request.get("messages", [])))
            completion = approx_tokens(message.get("content") or "")
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
        with self._lock:
            n = len(self.requests)
        self._send(
            handler,
            200,
            {
                "id": f"chatcmpl-replay-{n}",
                "object": "chat.completion",
                "created": 1730000000,
                "model": request.get("model", "replay"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            },
        )


class MisbehavingServer(_LoopbackServer):
    """See the module docstring. ``hits`` records ``(method, path, time)`` of every request."""

    def __init__(
        self, plan: list[Any], *, then: Any = "ok", slow_s: float = 0.5, hang_s: float = 30.0
    ):
        super().__init__()
        self.plan = list(plan)
        self.then = then
        self.slow_s = slow_s
        self.hang_s = hang_s
        self.hits: list[tuple[str, str, float]] = []

    def _dispatch(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        self._read_body(handler)
        with self._lock:
            index = len(self.hits)
            self.hits.append((method, handler.path, time.monotonic()))
            step = self.plan[index] if index < len(self.plan) else self.then
        self._perform(handler, self._expand(step, index))

    def _expand(self, step: Any, index: int) -> dict:
        ok_json = {"ok": True, "n": index}
        if isinstance(step, dict):
            return (
                {"status": 200, **step}
                if "status" in step or "json" in step or "body" in step
                else {"status": 200, "json": ok_json, **step}
            )
        if isinstance(step, int):
            return {"status": step, "json": {"error": f"scripted {step}", "n": index}}
        named = {
            "ok": {"status": 200, "json": ok_json},
            "malformed": {
                "status": 200,
                "body": '{"ok": tru',
                "headers": {"Content-Type": "application/json"},
            },
            "truncate": {"status": 200, "json": ok_json, "truncate": True},
            "hang": {"hang": True},
            "reset": {"reset": True},
            "slow": {"status": 200, "json": ok_json, "delay": self.slow_s},
        }
        if step not in named:
            raise ValueError(f"unknown MisbehavingServer step {step!r}")
        return named[step]

    def _perform(self, handler: BaseHTTPRequestHandler, step: dict) -> None:
        if step.get("hang"):
            self.stopping.wait(self.hang_s)
            return
        if step.get("reset"):
            handler.close_connection = True
            return
        if step.get("delay"):
            if self.stopping.wait(step["delay"]):
                return
        body = step.get("body")
        if "json" in step:
            body = json.dumps(step["json"])
        payload = (body or "").encode() if isinstance(body, str) else (body or b"")
        headers = {"Content-Type": "application/json", **(step.get("headers") or {})}
        handler.send_response(int(step.get("status", 200)))
        for name, value in headers.items():
            handler.send_header(name, value)
        if step.get("truncate"):
            # Promise twice the bytes, send half, close: the client sees a body cut short.
            handler.send_header("Content-Length", str(len(payload) * 2))
            handler.end_headers()
            handler.wfile.write(payload[: max(1, len(payload) // 2)])
            handler.close_connection = True
            return
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if step.get("drip"):
            for i in range(len(payload)):
                if self.stopping.wait(step["drip"]):
                    return
                handler.wfile.write(payload[i : i + 1])
                handler.wfile.flush()
            return
        handler.wfile.write(payload)


# ---------------------------------------------------------------------------------------------
# Tiny local models and a real OpenAI-compatible server (`transformers serve`) for them
# ---------------------------------------------------------------------------------------------

TINY_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|image_pad|>",
    "<|vision_end|>",
]
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'text' %}{{ p['text'] }}{% else %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TINY_CORPUS = [
    "The Eiffel Tower is in Paris. Answer: Paris.",
    "Thought: I should search. Action: text_search",
    "Observation: the page says the bridge opened in 1932.",
] * 20


def build_tiny_tokenizer():
    """A byte-level BPE tokenizer (~320 tokens) trained here on a few sentences, with a
    Qwen-style chat template and the vision marker tokens; no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=TINY_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator(TINY_CORPUS, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=TINY_SPECIAL_TOKENS[1:],
    )
    tok.chat_template = TINY_CHAT_TEMPLATE
    return tok


def build_tiny_causal_lm(path, *, seed: int = 0):
    """Save a 2-layer Qwen2 causal LM (hidden size 32) and its tokenizer to ``path``; returns
    ``path``.

    The wide initialisation keeps greedy decoding from collapsing onto a single token, so the
    model says varied (meaningless) things, which is what tests of stop strings need.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = build_tiny_tokenizer()
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.5,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def free_loopback_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TransformersServe:
    """``transformers serve MODEL_DIR`` on 127.0.0.1 (a real OpenAI-compatible server that this
    project did not write), started as a subprocess and stopped by its process id.

    Needs the ``serving`` extra (FastAPI, Uvicorn). Offline: ``HF_HUB_OFFLINE=1`` and a private
    ``HF_HOME`` so nothing is fetched or written to the user's cache.
    """

    def __init__(self, model_dir, *, home_dir, startup_timeout: float = 90.0):
        self.model_dir = str(model_dir)
        self.home_dir = str(home_dir)
        self.startup_timeout = startup_timeout
        self.port = free_loopback_port()
        self.process = None
        self.log_path = f"{self.home_dir}/serve.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "TransformersServe":
        import os
        import shutil
        import subprocess
        import sys
        import urllib.request

        exe = shutil.which("transformers", path=os.path.dirname(sys.executable))
        if exe is None:
            raise RuntimeError("the `transformers` command is not installed next to this Python")
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": self.home_dir,
            "TRANSFORMERS_VERBOSITY": "error",
            "NO_PROXY": "127.0.0.1",
            "OMP_NUM_THREADS": "1",
        }
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [
                exe,
                "serve",
                self.model_dir,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--device",
                "cpu",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"transformers serve exited early; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"transformers serve did not become healthy in {self.startup_timeout:.0f}s"
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except Exception:
                self.process.kill()
                self.process.wait(timeout=5)

    def __enter__(self) -> "TransformersServe":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
