"""Secrets: read from the environment or a named .env file, remembered, and masked everywhere."""

from __future__ import annotations

import pytest

from vsearcher_lite import redaction as red
from vsearcher_lite.live import secrets as sec
from vsearcher_lite.runio import InputError


def test_environment_wins_over_the_env_file(tmp_path, monkeypatch):
    env = tmp_path / "keys.env"
    env.write_text("SERPER_API_KEY=from-file-123456\n")
    monkeypatch.setenv("SERPER_API_KEY", "from-env-654321")
    assert sec.get_secret("SERPER_API_KEY", env_file=env) == "from-env-654321"


def test_env_file_named_by_variable_is_read(tmp_path, monkeypatch):
    env = tmp_path / "my.env"
    env.write_text("# my keys\nexport JINA_API_KEY='jina-file-abcdef'\nOTHER=1 # comment\n")
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    monkeypatch.setenv(sec.ENV_FILE_VAR, str(env))
    assert sec.get_secret("JINA_API_KEY") == "jina-file-abcdef"
    assert "jina-file-abcdef" in red.known_secrets()


def test_a_dotenv_in_the_working_folder_is_not_read_unless_named(tmp_path, monkeypatch):
    (tmp_path / ".env").write_text("SERPER_API_KEY=stray-value-999999\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    monkeypatch.delenv(sec.ENV_FILE_VAR, raising=False)
    assert sec.get_secret("SERPER_API_KEY", required=False) is None


def test_missing_required_key_names_variable_and_purpose(monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    monkeypatch.delenv(sec.ENV_FILE_VAR, raising=False)
    with pytest.raises(InputError, match=r"\$SERPER_API_KEY.*Serper text search"):
        sec.get_secret("SERPER_API_KEY")


def test_missing_env_file_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("X_KEY_FOR_TEST", raising=False)
    with pytest.raises(InputError, match="env file not found"):
        sec.get_secret("X_KEY_FOR_TEST", env_file=tmp_path / "nope.env")


def test_malformed_env_line_is_named_without_echoing_it(tmp_path):
    env = tmp_path / "bad.env"
    env.write_text("GOOD=1\nthis-line-holds-sk-SECRET-without-equals\n")
    with pytest.raises(InputError, match=r"bad.env:2") as info:
        sec.parse_env_file(env)
    assert "SECRET" not in str(info.value)


def test_redact_masks_values_read_and_key_shapes(monkeypatch):
    monkeypatch.setenv("VSEARCHER_CHAT_API_KEY", "chat-key-0123456789")
    key = sec.get_secret("VSEARCHER_CHAT_API_KEY")
    text = (
        f"POST https://api.example/v1?api_key=zzz999&q=cats Authorization: Bearer {key} "
        f"x-goog-api-key: AIzaSyD0123456789abcdefghijklmnopqrstu "
        f"https://user:pw123456@host.example/ "
        f"and sk-proj-aaaaaaaaaaaaaaaaaaaaaaaa plus {key}"
    )
    out = red.redact(text)
    for leaked in (
        key,
        "zzz999",
        "AIzaSyD0123456789abcdefghijklmnopqrstu",
        "pw123456",
        "sk-proj-aaaaaaaaaaaaaaaaaaaaaaaa",
    ):
        assert leaked not in out, leaked
    assert "q=cats" in out and "host.example" in out  # the rest survives


def test_redact_extra_secrets_and_leaves_short_values_alone():
    assert red.redact("token abcdefgh here", ["abcdefgh"]) == "token *** here"
    # Too short to be a key: masking it would mangle ordinary text.
    assert red.redact("a1 in text", ["a1"]) == "a1 in text"


def test_longer_secret_containing_a_shorter_one_is_masked_whole():
    out = red.redact("value=prefix-123456-suffix", ["prefix-123456", "prefix-123456-suffix"])
    assert "suffix" not in out and "123456" not in out


def test_scan_for_secrets_finds_leaks_without_echoing_them(tmp_path):
    run = tmp_path / "run"
    (run / "stage").mkdir(parents=True)
    (run / "stage" / "metrics.json").write_text('{"ok": 1}')
    (run / "stage" / "log.jsonl").write_text('{"url": "https://x/?key=leaky-value-424242"}\n')
    (run / "cache.sqlite").write_bytes(b"\x00\x01leaky-value-424242\x00")
    leaks = red.scan_for_secrets(run, ["leaky-value-424242"])
    assert [line.split(":")[0] for line in leaks] == [
        str(run / "cache.sqlite"),
        str(run / "stage" / "log.jsonl"),
    ]
    assert all("leaky-value-424242" not in line for line in leaks)
    assert red.scan_for_secrets(run / "stage" / "metrics.json", ["leaky-value-424242"]) == []
