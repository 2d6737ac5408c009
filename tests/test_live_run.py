"""A whole live episode, recorded and then replayed offline: identical trajectory, no key anywhere.

The agent loop runs a scripted policy (search, image search, visit, answer) against the live
backends, which reach a scripted web through a mock transport (no socket is opened). The run
is written to a run folder as a real stage would write it. Then the keys are removed, the
transport is replaced by one that fails the test if called, and the same episode is replayed
from the tool cache: it must produce the same trajectory, turn for turn. Finally every file
of the run folder (trajectory, metrics, the SQLite cache and its WAL) is scanned for the keys.
"""

from __future__ import annotations

import json

from fixtures.recorded.mockweb import PNG_BYTES, fast_http, forbidden_transport, stub_resolver
from test_live_replay import KEYS, OTHER_VARS, live_web, no_dns

from vsearcher_lite.agent.loop import run_episode
from vsearcher_lite.agent.protocol import format_assistant_turn
from vsearcher_lite.agent.task import Task
from vsearcher_lite.backends.toolbox import CACHE_FILE
from vsearcher_lite.cache import ToolCache
from vsearcher_lite.chat import ScriptedChat
from vsearcher_lite.live.tools import make_live_backends
from vsearcher_lite.net.guard import UrlGuard
from vsearcher_lite.redaction import scan_for_secrets
from vsearcher_lite.runio import RunDir, atomic_write_json
from vsearcher_lite.tools.sandbox import ExtractiveSummariser

SCRIPT = [
    format_assistant_turn("Find out what the picture shows.", tool_call=("image_search", {})),
    format_assistant_turn(
        "Search the name.", tool_call=("text_search", {"query": "oldmere abbey"})
    ),
    format_assistant_turn(
        "Read the page.",
        tool_call=(
            "visit",
            {
                "url": "https://heritage.example.org/oldmere",
                "goal": "When was the chapter house rebuilt?",
            },
        ),
    ),
    format_assistant_turn(
        "A bad URL, to record an error observation too.",
        tool_call=("visit", {"url": "file:///etc/passwd", "goal": "anything"}),
    ),
    format_assistant_turn("The page said 1312.", answer="1312"),
]


def comparable(trajectory) -> dict:
    """The trajectory without its timings (the only fields a replay may change)."""
    d = trajectory.to_dict()
    d.pop("seconds")
    for turn in d["turns"]:
        turn.pop("policy_seconds")
        turn.pop("tool_seconds")
    return d


def episode(toolbox, task):
    return run_episode(ScriptedChat(list(SCRIPT)), toolbox, task)


def test_replayed_live_run_gives_the_identical_trajectory_and_leaks_no_key(tmp_path, monkeypatch):
    for var in OTHER_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in KEYS.items():
        monkeypatch.setenv(var, value)
    run = RunDir(tmp_path / "run")
    image = run.stage("tasks") / "question.png"
    image.write_bytes(PNG_BYTES)
    task = Task(
        id="live-1",
        question="When was the chapter house of the abbey shown in the image rebuilt?",
        answer="1312",
        image_path=str(image),
        world="live",
    )

    cache_path = run.root / CACHE_FILE
    web = live_web()
    recording = make_live_backends(
        cache=ToolCache(cache_path),
        guard=UrlGuard(resolver=stub_resolver({})),
        http_options=fast_http(web),
        summariser=ExtractiveSummariser(),
    )
    recorded = episode(recording.toolbox(cache=ToolCache(cache_path), namespace="tools.live"), task)
    assert recorded.termination == "answer" and recorded.prediction == "1312"
    assert [t.observation["ok"] for t in recorded.tool_calls] == [True, True, True, False]
    assert web.requests, "the recording reached the (scripted) web"
    atomic_write_json(run.stage("eval") / "trajectory.json", recorded.to_dict())
    run.write_metrics("eval", {"n": 1, "backends": recording.describe()})

    for var in KEYS:
        monkeypatch.delenv(var)
    sent = len(web.requests)
    replay_cache = ToolCache(cache_path, mode="replay")
    replaying = make_live_backends(
        cache=replay_cache,
        guard=UrlGuard(resolver=no_dns),
        http_options=fast_http(forbidden_transport()),
        summariser=ExtractiveSummariser(),
    )
    replayed = episode(replaying.toolbox(cache=replay_cache, namespace="tools.live"), task)

    assert comparable(replayed) == comparable(recorded)
    assert len(web.requests) == sent
    assert json.loads((run.root / "eval" / "trajectory.json").read_text())["prediction"] == "1312"
    assert scan_for_secrets(run.root, KEYS.values()) == []
    assert list(run.root.rglob("tools.sqlite*")), "the scan covered the cache files"


def test_the_scan_finds_a_key_that_did_leak(tmp_path):
    (tmp_path / "log.txt").write_text("calling with key " + KEYS["SERPER_API_KEY"])
    leaks = scan_for_secrets(tmp_path, KEYS.values())
    assert len(leaks) == 1 and KEYS["SERPER_API_KEY"] not in leaks[0]
