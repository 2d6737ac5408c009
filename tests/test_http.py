"""HttpClient against misbehaving loopback servers and mock transports (no traffic leaves
127.0.0.1)."""

from __future__ import annotations

import random
import threading
import time

import httpx
import pytest
from servers import MisbehavingServer

from vsearcher_lite.net.http import (
    HttpClient,
    HttpError,
    TokenBucket,
    backoff_delay,
    parse_retry_after,
)


class SleepRecorder:
    """An injected sleep that records the delays it was asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def fast_client(**kw) -> HttpClient:
    defaults = dict(
        timeout=2.0, max_retries=4, backoff_base=0.01, backoff_max=0.05, total_timeout=10.0
    )
    defaults.update(kw)
    return HttpClient("test", **defaults)


def test_500_then_success_retries_and_counts():
    sleep = SleepRecorder()
    with MisbehavingServer([500, 500]) as server:
        client = fast_client(sleep=sleep)
        data = client.get_json(server.url + "/x")
    assert data == {"ok": True, "n": 2}
    assert len(server.hits) == 3
    assert (
        client.stats["requests"] == 3
        and client.stats["retries"] == 2
        and client.stats["failures"] == 0
    )
    assert len(sleep.delays) == 2 and all(0 <= d <= 0.05 for d in sleep.delays)


def test_429_retry_after_seconds_is_honoured_and_capped():
    sleep = SleepRecorder()
    plan = [
        {"status": 429, "headers": {"Retry-After": "3"}},
        {"status": 429, "headers": {"Retry-After": "120"}},
    ]
    with MisbehavingServer(plan) as server:
        client = fast_client(sleep=sleep, backoff_max=10.0, total_timeout=60.0)
        assert client.get_json(server.url)["n"] == 2
    # 3 s as asked; 120 s capped at backoff_max.
    assert sleep.delays == [3.0, 10.0]


def test_parse_retry_after_forms():
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("  0 ") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == 30.0
    # A date in the past means "now", not a negative wait.
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0) == 0.0
    assert parse_retry_after("later") is None and parse_retry_after(None) is None


def test_backoff_is_full_jitter_bounded_and_deterministic():
    a = [backoff_delay(i, 0.5, 4.0, random.Random(7)) for i in range(10)]
    b = [backoff_delay(i, 0.5, 4.0, random.Random(7)) for i in range(10)]
    assert a == b
    rng = random.Random(1)
    samples = [backoff_delay(6, 0.5, 4.0, rng) for _ in range(500)]
    assert max(samples) <= 4.0 and min(samples) >= 0.0
    # Full jitter spreads over the whole range rather than clustering at the cap.
    assert min(samples) < 0.5 and max(samples) > 3.5


def test_truncated_body_and_reset_connection_are_retried():
    with MisbehavingServer(["truncate", "reset"]) as server:
        client = fast_client(sleep=SleepRecorder())
        assert client.get_json(server.url) == {"ok": True, "n": 2}
    assert client.stats["retries"] == 2


def test_malformed_json_raises_clear_error_without_retry():
    with MisbehavingServer(["malformed"]) as server:
        client = fast_client(sleep=SleepRecorder())
        with pytest.raises(HttpError, match="malformed JSON") as info:
            client.get_json(server.url + "/data")
    assert "/data" in info.value.url and info.value.status == 200
    assert len(server.hits) == 1


def test_hanging_connection_times_out_and_next_attempt_succeeds():
    with MisbehavingServer(["hang"]) as server:
        client = fast_client(timeout=0.3, sleep=SleepRecorder())
        start = time.monotonic()
        assert client.get_json(server.url)["n"] == 1
        elapsed = time.monotonic() - start
    assert 0.25 <= elapsed < 2.0


def test_misbehaving_sequence_survived_with_bounded_retries_and_time():
    """The acceptance scenario: slow, 429, 500, truncated body, then a good answer."""
    plan = ["slow", {"status": 429, "headers": {"Retry-After": "0"}}, 503, "truncate"]
    with MisbehavingServer(plan, slow_s=0.5) as server:
        client = HttpClient(
            "acceptance",
            timeout=0.25,
            max_retries=5,
            backoff_base=0.01,
            backoff_max=0.05,
            total_timeout=5.0,
        )
        start = time.monotonic()
        assert client.get_json(server.url) == {"ok": True, "n": 4}
        elapsed = time.monotonic() - start
    assert client.stats["retries"] == 4 and len(server.hits) == 5
    assert elapsed < 3.0


def test_persistent_failure_stops_after_max_retries():
    with MisbehavingServer([], then=500) as server:
        client = fast_client(max_retries=3, sleep=SleepRecorder())
        with pytest.raises(HttpError, match="after 4 attempt") as info:
            client.get(server.url + "/always-broken")
    assert info.value.status == 500 and len(server.hits) == 4
    assert client.stats["failures"] == 1


def test_total_timeout_bounds_a_call_against_a_slow_server():
    # Every answer arrives after 0.4 s, the per-attempt timeout is 0.15 s: retries alone would
    # go on for 50 attempts; the 1 s total limit ends the call.
    with MisbehavingServer([], then="slow", slow_s=0.4) as server:
        client = HttpClient(
            "slow",
            timeout=0.15,
            max_retries=50,
            backoff_base=0.05,
            backoff_max=0.1,
            total_timeout=1.0,
        )
        start = time.monotonic()
        with pytest.raises(HttpError, match="timed out"):
            client.get(server.url)
        elapsed = time.monotonic() - start
    assert elapsed < 1.6
    assert len(server.hits) < 10


def test_total_timeout_stops_a_dripping_body():
    # Each byte arrives well inside the read timeout, so only the total limit can stop it.
    with MisbehavingServer([{"json": {"padding": "x" * 200}, "drip": 0.02}]) as server:
        client = HttpClient("drip", timeout=1.0, max_retries=0, total_timeout=0.4)
        start = time.monotonic()
        with pytest.raises(HttpError, match="timed out"):
            client.get(server.url)
        assert time.monotonic() - start < 1.5


def test_connection_refused_names_the_url():
    with MisbehavingServer([]) as server:
        url = server.url
    # The server is closed now: nothing listens on its port.
    client = fast_client(max_retries=1, sleep=SleepRecorder())
    with pytest.raises(HttpError, match="connection refused") as info:
        client.get(url + "/v1/chat/completions")
    assert url in str(info.value) and info.value.status is None


def test_404_fails_at_once_and_names_the_url():
    with MisbehavingServer([404]) as server:
        client = fast_client(sleep=SleepRecorder())
        with pytest.raises(HttpError, match="does not exist") as info:
            client.get(server.url + "/missing/page")
    assert "/missing/page" in str(info.value) and info.value.status == 404
    assert len(server.hits) == 1


def test_401_names_the_key_variable_and_never_the_key():
    secret = "sk-live-ABCDEF0123456789"

    def app(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": f"key {request.headers['x-api-key']} is invalid"})

    client = HttpClient(
        "serper",
        transport=httpx.MockTransport(app),
        key_var="SERPER_API_KEY",
        headers={"X-API-KEY": secret},
    )
    with pytest.raises(HttpError) as info:
        client.post(
            "https://google.serper.dev/search", json={"q": "x"}, params={"key": "other-secret-777"}
        )
    text = str(info.value) + info.value.url + info.value.body
    assert "$SERPER_API_KEY" in str(info.value)
    assert secret not in text and "other-secret-777" not in text
    assert "***" in text


def test_secrets_given_to_the_client_are_redacted_from_retry_errors():
    secret = "tok_9f8e7d6c5b4a"

    def app(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text=f"backend overloaded while serving {request.url}")

    client = HttpClient(
        "x",
        transport=httpx.MockTransport(app),
        secrets=[secret],
        max_retries=1,
        sleep=SleepRecorder(),
    )
    with pytest.raises(HttpError) as info:
        client.get(f"https://api.example/{secret}/q")
    assert (
        secret not in str(info.value)
        and secret not in info.value.body
        and secret not in info.value.url
    )


def test_max_bytes_cuts_the_body_and_marks_it():
    def app(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"a" * 10_000)

    client = HttpClient("cap", transport=httpx.MockTransport(app))
    response = client.get("https://example.org/big", max_bytes=1000)
    assert len(response.content) == 1000 and response.extensions["truncated"] is True
    full = client.get("https://example.org/big")
    assert len(full.content) == 10_000 and full.extensions["truncated"] is False


def test_redirects_are_followed_and_303_turns_post_into_get():
    seen: list[tuple[str, str]] = []

    def app(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        if request.url.path == "/start":
            return httpx.Response(303, headers={"Location": "/final"})
        return httpx.Response(200, json={"at": request.url.path})

    client = HttpClient("redir", transport=httpx.MockTransport(app))
    assert client.post_json("https://example.org/start", json={"a": 1}) == {"at": "/final"}
    assert seen == [("POST", "/start"), ("GET", "/final")]


def test_redirect_loop_is_bounded():
    def app(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "/again"})

    client = HttpClient("loop", transport=httpx.MockTransport(app))
    with pytest.raises(HttpError, match="too many redirects"):
        client.get("https://example.org/")


def test_concurrency_limit_holds_across_threads():
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    def app(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.02)
        with lock:
            in_flight -= 1
        return httpx.Response(200, json={})

    client = HttpClient("par", transport=httpx.MockTransport(app), max_concurrency=2)
    threads = [
        threading.Thread(target=client.get_json, args=("https://example.org/",)) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2 and client.stats["requests"] == 8


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_token_bucket_spaces_requests_at_the_rate():
    clock = FakeClock()
    bucket = TokenBucket(4.0, clock=clock, sleep=clock.sleep)
    for _ in range(9):
        bucket.acquire()
    # The first request is free; the next eight wait 1/4 s each.
    assert clock.now == pytest.approx(2.0)


def test_rate_limited_client_waits_between_requests():
    clock = FakeClock()
    client = HttpClient(
        "rl",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json={})),
        rate_per_s=2.0,
        clock=clock,
        sleep=clock.sleep,
    )
    for _ in range(5):
        client.get_json("https://example.org/")
    assert clock.now == pytest.approx(2.0)


def test_total_timeout_counts_backoff_sleeps():
    # With a fake clock, only the sleeps advance time: Retry-After of 4 s three times would
    # need 12 s, more than the 10 s budget, so the call gives up before the third sleep.
    clock = FakeClock()
    app = lambda r: httpx.Response(429, headers={"Retry-After": "4"})  # noqa: E731
    client = HttpClient(
        "budget",
        transport=httpx.MockTransport(app),
        max_retries=10,
        total_timeout=10.0,
        backoff_max=30.0,
        clock=clock,
        sleep=clock.sleep,
    )
    with pytest.raises(HttpError, match="total time limit") as info:
        client.get("https://example.org/")
    assert clock.now == pytest.approx(8.0) and info.value.status == 429


def test_params_are_added_to_an_existing_query_string():
    seen: list[str] = []

    def app(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={})

    HttpClient("q", transport=httpx.MockTransport(app)).get_json(
        "https://example.org/s?format=json", params={"q": "a b"}
    )
    assert seen == ["https://example.org/s?format=json&q=a+b"]
