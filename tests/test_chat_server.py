"""OpenAIChat against a real OpenAI-compatible server that this project did not write:
``transformers serve`` on 127.0.0.1 with a tiny model built here.

Skipped when the ``serving`` extra (FastAPI, Uvicorn) is not installed. Startup takes a few
seconds on 2 cores, so one server is shared by the module.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from servers import TransformersServe, build_tiny_causal_lm  # noqa: E402

from vsearcher_lite.chat import ChatError  # noqa: E402
from vsearcher_lite.chat.local import TransformersChat  # noqa: E402
from vsearcher_lite.live.openai import OpenAIChat  # noqa: E402

USER = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Where is the Eiffel Tower?"},
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    model_dir = build_tiny_causal_lm(tmp_path_factory.mktemp("served-lm"))
    with TransformersServe(model_dir, home_dir=tmp_path_factory.mktemp("hf-home")) as server:
        yield server, model_dir


def test_greedy_reply_matches_the_local_backend(served, monkeypatch):
    server, model_dir = served
    for var in ("VSEARCHER_CHAT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    remote = OpenAIChat(str(model_dir), server.base_url, max_retries=1, timeout=60)
    reply = remote.chat(USER, temperature=0, max_tokens=12)
    again = remote.chat(USER, temperature=0, max_tokens=12)
    assert reply == again and reply.strip()
    assert remote.usage["requests"] == 2 and remote.usage["completion_tokens"] > 0
    # Same weights, same template, greedy: the in-process backend says the same thing.
    local = TransformersChat(model_dir).chat(USER, temperature=0, max_tokens=12)
    assert reply == local


def test_stop_string_is_honoured_through_the_server(served):
    server, model_dir = served
    remote = OpenAIChat(str(model_dir), server.base_url, max_retries=1, timeout=60)
    full = remote.chat(USER, temperature=0, max_tokens=24)
    stop = next(
        (
            full[i : i + 2]
            for i in range(len(full) // 3, len(full) - 2)
            if full[i : i + 2].isascii() and full[i : i + 2].strip() == full[i : i + 2]
        ),
        None,
    )
    assert stop, f"no ASCII stop candidate in {full!r}"
    cut = remote.chat(USER, temperature=0, max_tokens=24, stop=[stop])
    assert cut == full[: full.find(stop)]


def test_wrong_model_name_is_named_in_the_error(served):
    server, _ = served
    with pytest.raises(ChatError, match=r"model 'not-the-served-model' not found"):
        OpenAIChat("not-the-served-model", server.base_url, max_retries=0).chat(USER, max_tokens=4)
