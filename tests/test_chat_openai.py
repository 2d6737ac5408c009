"""OpenAIChat against a real OpenAI-compatible server on 127.0.0.1 that replays scripted replies."""

from __future__ import annotations

import base64
import io
import threading

import pytest
from PIL import Image
from servers import MisbehavingServer, ReplayChatServer

from vsearcher_lite.backends.chat import make_chat
from vsearcher_lite.chat import ChatBackend, ChatError, ScriptedChat, image_to_url, usage_of
from vsearcher_lite.live.openai import OpenAIChat, normalise_base_url, to_openai_message
from vsearcher_lite.runio import InputError

CHAT_ENV = (
    "VSEARCHER_CHAT_MODEL",
    "VSEARCHER_CHAT_BASE_URL",
    "VSEARCHER_CHAT_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "VSEARCHER_ENV_FILE",
    "GEMINI_API_KEY",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in CHAT_ENV:
        monkeypatch.delenv(var, raising=False)


def no_sleep(_seconds: float) -> None:
    pass


def backend(server: ReplayChatServer, **kw) -> OpenAIChat:
    kw.setdefault("sleep", no_sleep)
    kw.setdefault("timeout", 5.0)
    return OpenAIChat(kw.pop("model", "tiny-vlm"), server.base_url, **kw)


@pytest.fixture
def png_file(tmp_path):
    path = tmp_path / "question.png"
    Image.new("RGB", (4, 3), (200, 10, 10)).save(path)
    return path


def test_messages_and_sampling_arrive_in_the_openai_shape(png_file):
    with ReplayChatServer(["<answer>Paris</answer>"]) as server:
        bot = backend(server)
        messages = [
            {"role": "system", "content": "You are a search agent."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Which city?"},
                    {"type": "image", "image": str(png_file)},
                    {"type": "image", "image": "https://example.org/tower.jpg"},
                ],
            },
        ]
        reply = bot.chat(
            messages,
            temperature=0.7,
            top_p=0.9,
            max_tokens=64,
            stop=["</answer>"],
            seed=3,
            reasoning_effort="low",
        )
    # The server replied with the stop string included; the client cuts it like OpenAI would.
    assert reply == "<answer>Paris"
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    body = request["json"]
    assert body["model"] == "tiny-vlm"
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["stop"], body["seed"]) == (
        0.7,
        0.9,
        64,
        ["</answer>"],
        3,
    )
    assert body["reasoning_effort"] == "low"  # extra keywords pass through
    assert body["messages"][0] == {"role": "system", "content": "You are a search agent."}
    text, local, remote = body["messages"][1]["content"]
    assert text == {"type": "text", "text": "Which city?"}
    assert remote == {"type": "image_url", "image_url": {"url": "https://example.org/tower.jpg"}}
    url = local["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.size == (4, 3) and decoded.getpixel((0, 0)) == (200, 10, 10)
    assert "Authorization" not in request["headers"]  # no key configured, none sent


def test_usage_is_accumulated_across_calls_and_threads():
    replies = [
        {
            "content": "ok",
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }
    ] * 6
    with ReplayChatServer(replies) as server:
        bot = backend(server)
        threads = [
            threading.Thread(target=bot.chat, args=([{"role": "user", "content": "hi"}],))
            for _ in range(6)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert bot.usage == {
        "prompt_tokens": 60,
        "completion_tokens": 12,
        "requests": 6,
        "responses_without_usage": 0,
    }


def test_missing_usage_is_counted_not_fatal():
    reply = {
        "raw": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}}]}
    }
    with ReplayChatServer([reply]) as server:
        bot = backend(server)
        assert bot.chat([{"role": "user", "content": "x"}]) == "fine"
    assert bot.usage["requests"] == 1 and bot.usage["responses_without_usage"] == 1


def test_500_then_success_is_retried():
    with ReplayChatServer([{"status": 500}, {"status": 502}, "recovered"]) as server:
        bot = backend(server)
        assert bot.chat([{"role": "user", "content": "x"}]) == "recovered"
    assert len(server.requests) == 3 and bot.http_stats["retries"] == 2


def test_429_retry_after_is_honoured():
    delays: list[float] = []
    with ReplayChatServer([{"status": 429, "headers": {"Retry-After": "2"}}, "done"]) as server:
        bot = backend(server, sleep=delays.append)
        assert bot.chat([{"role": "user", "content": "x"}]) == "done"
    assert delays == [2.0]


def test_invalid_key_gives_a_clear_error_without_the_key(monkeypatch):
    monkeypatch.setenv("VSEARCHER_CHAT_API_KEY", "sk-wrong-key-123456789")
    with ReplayChatServer(["never"], api_key="sk-right-key-000000000") as server:
        bot = backend(server)
        with pytest.raises(
            ChatError, match=r"rejected the API key \(HTTP 401\): check \$VSEARCHER_CHAT_API_KEY"
        ) as info:
            bot.chat([{"role": "user", "content": "x"}])
    assert "sk-wrong-key-123456789" not in str(info.value)
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-wrong-key-123456789"
    assert len(server.requests) == 1  # 401 is not retried


def test_right_key_from_openai_variable_is_sent(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-right-key-000000000")
    with ReplayChatServer(["hello"], api_key="sk-right-key-000000000") as server:
        assert backend(server).chat([{"role": "user", "content": "x"}]) == "hello"


def test_missing_model_names_the_model():
    with ReplayChatServer(["never"], models=["qwen2.5-vl-3b"]) as server:
        bot = backend(server, model="qwen-typo")
        with pytest.raises(ChatError, match=r"model 'qwen-typo' not found") as info:
            bot.chat([{"role": "user", "content": "x"}])
        assert bot.__class__ is OpenAIChat and server.base_url in str(info.value)
        assert backend(server, model="qwen2.5-vl-3b").list_models() == ["qwen2.5-vl-3b"]


def test_wrong_path_404_points_at_the_base_url():
    with ReplayChatServer(["never"]) as server:
        bot = OpenAIChat("m", server.url + "/api", sleep=no_sleep)  # forgot /v1
        with pytest.raises(ChatError, match=r"check the base URL"):
            bot.chat([{"role": "user", "content": "x"}])


def test_connection_refused_names_the_url():
    with ReplayChatServer([]) as server:
        base = server.base_url
    bot = OpenAIChat("m", base, sleep=no_sleep, max_retries=1)
    with pytest.raises(ChatError, match="connection refused") as info:
        bot.chat([{"role": "user", "content": "x"}])
    assert base in str(info.value)


def test_server_that_times_out_becomes_a_chat_error():
    with MisbehavingServer([], then="hang") as server:
        bot = OpenAIChat("m", server.url + "/v1", timeout=0.2, max_retries=1, sleep=no_sleep)
        with pytest.raises(ChatError, match="timed out"):
            bot.chat([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    "reply, reason",
    [
        ({"raw": {"id": "x", "choices": []}}, "no choices"),
        ({"raw": {"id": "x"}}, "no choices"),
        ({"content": None, "reasoning_content": "long thoughts"}, "only reasoning_content"),
        ({"content": None}, "no message content"),
        (
            {"content": None, "tool_calls": [{"id": "1", "type": "function"}]},
            "tool calls but no text",
        ),
        ({"content": "", "finish_reason": "length"}, "max_tokens"),
        ({"raw": {"error": {"message": "overloaded"}}}, "returned an error"),
        ({"raw": ["not", "an", "object"]}, "not a chat.completion"),
    ],
)
def test_replies_without_text_raise_chat_error(reply, reason):
    with ReplayChatServer([reply]) as server:
        with pytest.raises(ChatError, match=reason):
            backend(server).chat([{"role": "user", "content": "x"}])


def test_reasoning_content_is_kept_aside_when_content_exists():
    with ReplayChatServer([{"content": "42", "reasoning_content": "6 times 7"}]) as server:
        bot = backend(server)
        assert bot.chat([{"role": "user", "content": "x"}]) == "42"
    assert bot.last_reasoning == "6 times 7"


def test_malformed_json_from_server_is_a_chat_error():
    with MisbehavingServer(["malformed"]) as server:
        with pytest.raises(ChatError, match="malformed JSON"):
            OpenAIChat("m", server.url + "/v1", sleep=no_sleep).chat(
                [{"role": "user", "content": "x"}]
            )


def test_settings_come_from_environment(monkeypatch):
    with ReplayChatServer(["from env"]) as server:
        monkeypatch.setenv("VSEARCHER_CHAT_MODEL", "env-model")
        monkeypatch.setenv("VSEARCHER_CHAT_BASE_URL", server.base_url + "/")
        bot = OpenAIChat(sleep=no_sleep)
        assert bot.chat([{"role": "user", "content": "x"}]) == "from env"
    assert server.requests[0]["json"]["model"] == "env-model"


def test_no_model_anywhere_is_an_input_error():
    with pytest.raises(InputError, match=r"\$VSEARCHER_CHAT_MODEL"):
        OpenAIChat()


def test_defaults_apply_and_calls_override_them():
    with ReplayChatServer(["a", "b"]) as server:
        bot = backend(server, defaults={"temperature": 0.0, "max_tokens": 16})
        bot.chat([{"role": "user", "content": "x"}])
        bot.chat([{"role": "user", "content": "x"}], temperature=1.0, stop="STOP")
    first, second = (r["json"] for r in server.requests)
    assert (first["temperature"], first["max_tokens"], "stop" in first) == (0.0, 16, False)
    assert (second["temperature"], second["max_tokens"], second["stop"]) == (1.0, 16, ["STOP"])


def test_image_helpers_reject_bad_input(tmp_path):
    with pytest.raises(InputError, match="image file not found"):
        image_to_url(tmp_path / "missing.png")
    bogus = tmp_path / "fake.png"
    bogus.write_text("not an image")
    with pytest.raises(InputError, match="not a readable image"):
        image_to_url(bogus)
    # The MIME type comes from the bytes, not the file name.
    jpeg = tmp_path / "really-a-jpeg.png"
    Image.new("RGB", (2, 2)).save(jpeg, format="JPEG")
    assert image_to_url(jpeg).startswith("data:image/jpeg;base64,")


def test_to_openai_message_leaves_text_messages_alone():
    message = {"role": "assistant", "content": "plain"}
    assert to_openai_message(message) == message


def test_base_url_normalisation_and_validation():
    assert normalise_base_url("http://h:1/v1/") == "http://h:1/v1"
    with pytest.raises(InputError, match="must start with http"):
        normalise_base_url("localhost:8000/v1")


def test_make_chat_specs():
    bot = make_chat("openai:qwen2.5:7b@http://127.0.0.1:11434/v1")
    assert (
        isinstance(bot, OpenAIChat)
        and bot.model == "qwen2.5:7b"
        and bot.base_url == "http://127.0.0.1:11434/v1"
    )
    bot = make_chat(
        {"backend": "openai", "model": "m", "base_url": "https://example.org/v1", "max_retries": 1}
    )
    assert bot.model == "m" and bot._http.max_retries == 1
    scripted = ScriptedChat(["x"])
    assert make_chat(scripted) is scripted
    for bad in ("gpt-4o", "claude:x", {"backend": "nope"}, "", {"backend": "transformers"}):
        with pytest.raises(InputError, match="chat spec"):
            make_chat(bad)
    assert isinstance(make_chat("openai:m@http://127.0.0.1:1/v1"), ChatBackend)


def test_key_from_an_env_file_is_sent_and_never_shown(tmp_path, monkeypatch):
    env = tmp_path / "keys.env"
    env.write_text("VSEARCHER_CHAT_API_KEY=sk-from-file-55555555\n")
    monkeypatch.setenv("VSEARCHER_ENV_FILE", str(env))
    with ReplayChatServer([{"status": 403}], api_key=None) as server:
        bot = backend(server)
        with pytest.raises(ChatError) as info:
            bot.chat([{"role": "user", "content": "x"}])
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-from-file-55555555"
    assert "sk-from-file-55555555" not in str(info.value) + repr(bot)
    assert "$VSEARCHER_CHAT_API_KEY" in str(info.value)


def test_gemini_endpoint_reads_gemini_key(monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-gemini-test-key-123")
    bot = OpenAIChat("gemini-2.5-flash", "https://generativelanguage.googleapis.com/v1beta/openai/")
    assert bot.key_var == "GEMINI_API_KEY" and bot.base_url.endswith("/v1beta/openai")
    assert OpenAIChat("m", "http://127.0.0.1:9/v1").key_var is None  # not used for other endpoints


def test_usage_of_copies_and_tolerates_backends_without_usage():
    with ReplayChatServer(["a"]) as server:
        bot = backend(server)
        bot.chat([{"role": "user", "content": "one two"}])
    snapshot = usage_of(bot)
    snapshot["requests"] = 99
    assert bot.usage["requests"] == 1
    assert usage_of(ScriptedChat(["x"])) == {}
