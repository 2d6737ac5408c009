"""The LLM writer: parsing, validation, retries and counted failures, with scripted and served
replies."""

import json
import random
import time
from pathlib import Path

import pytest
from servers import MisbehavingServer, ReplayChatServer
from test_synth_support import tiny_world

from vsearcher_lite.chat import ScriptedChat, message_text
from vsearcher_lite.live.openai import OpenAIChat
from vsearcher_lite.runio import read_jsonl
from vsearcher_lite.synthesis.inject import InjectConfig, run_inject_text
from vsearcher_lite.synthesis.llm_writer import LLMWriter, cut_page, parse_qa_json
from vsearcher_lite.synthesis.seeds import SeedConfig
from vsearcher_lite.synthesis.synthesizer import Synthesizer, TaskDropped
from vsearcher_lite.synthesis.writer import WriterError

QA = '```json\n{"question": "Who designed the Orsk Bridge?", "answer": "Ilsa Maren"}\n```'
FACT = "The Orsk Bridge crosses the Drun River in the town of Orsk."
REWRITE = "Who designed the bridge that crosses the Drun River?"
IMAGE_REWRITE = "Who designed the bridge that crosses the river shown in the image?"


def kind_of(messages) -> str:
    """Which writer operation a prompt is (from its wording)."""
    text = message_text(messages[0])
    for key, name in (
        ("Reply with a JSON object", "qa"),
        ("Choose one named entity", "pick"),
        ("choose ONE fact", "fact"),
        ("Entity to hide", "rewrite"),
        ("matters most for finding the answer", "critical"),
        ("will see a picture", "image"),
    ):
        if key in text:
            return name
    raise AssertionError(f"unexpected prompt: {text[:80]}")


def scripted(**overrides):
    """A chat that answers each operation; ``overrides[op]`` is a list of replies used first."""
    default = {
        "qa": QA,
        "pick": "Orsk Bridge",
        "fact": FACT,
        "rewrite": REWRITE,
        "critical": "Drun River",
        "image": IMAGE_REWRITE,
    }
    queues = {k: list(v) for k, v in overrides.items()}

    def reply(messages):
        op = kind_of(messages)
        if queues.get(op):
            item = queues[op].pop(0)
            return item(messages) if callable(item) else item
        return default[op]

    return ScriptedChat(reply)


@pytest.fixture
def world(tmp_path):
    return tiny_world(tmp_path)


def seed(world, sid="B1"):
    return next(s for s in world.seeds(5, 5) if s.id == sid)


def build(world, chat, tmp_path, n_rounds=1, max_attempts=3):
    writer = LLMWriter(chat, max_attempts=max_attempts)
    synth = Synthesizer(world, writer)
    task = synth.text_task(seed(world), "train", "easy", n_rounds, random.Random(0))
    return synth.image_task(task, random.Random(1), tmp_path / "images"), writer


def test_parse_qa_json_tolerates_fences_and_prose():
    assert parse_qa_json(
        'Sure! Here you go: {"question": "Q?", "answer": 1874} Hope it helps.'
    ) == {"question": "Q?", "answer": "1874"}
    assert parse_qa_json(QA)["answer"] == "Ilsa Maren"
    for bad in (
        "no json here",
        '{"question": "Q?"}',
        '{"question": "Q?", "answer": ""}',
        '["a"]',
        '{"question": "Q?", answer: x}',
    ):
        with pytest.raises(WriterError):
            parse_qa_json(bad)


def test_cut_page_keeps_whole_sentences():
    text = "First sentence here. " * 50
    cut = cut_page(text, 200)
    assert len(cut) <= 200 and cut.endswith(".")


def test_happy_path_records_every_round(world, tmp_path):
    task, writer = build(world, scripted(), tmp_path)
    assert task.initial_question == "Who designed the Orsk Bridge?" and task.answer == "Ilsa Maren"
    assert task.rounds[0].entity == "Orsk Bridge" and task.rounds[0].entity_id == "B1"
    assert task.rounds[0].fact["value"] == FACT and task.rounds[0].question_after == REWRITE
    assert task.image.entity_id == "V1" and task.question == IMAGE_REWRITE
    assert task.image.description == "the river shown in the image"
    assert Path(task.image_path).is_file() and task.image_path.endswith(".jpg")
    assert task.extra["answer_invariant"] is None  # free-text facts cannot be re-solved
    assert writer.stats["retries"] == 0 and writer.stats["calls"] == 6


def test_malformed_json_is_retried(world, tmp_path):
    chat = scripted(qa=["{not json", "The answer is Ilsa Maren."])
    task, writer = build(world, chat, tmp_path)
    assert task.answer == "Ilsa Maren"
    assert writer.stats["problems"] == {"malformed_json": 2} and writer.stats["retries"] == 2
    # the retry shows the model its own reply and what was wrong with it
    retry = [c for c in chat.calls if kind_of(c["messages"]) == "qa"][1]["messages"]
    assert retry[1]["role"] == "assistant" and "cannot be used" in retry[2]["content"]


def test_entity_not_in_question_drops_the_task_with_its_reason(world, tmp_path):
    chat = scripted(pick=["Velmora Castle"] * 10)
    with pytest.raises(TaskDropped) as info:
        build(world, chat, tmp_path)
    assert info.value.reason == "entity_not_in_question" and info.value.round == 1


def test_unknown_page_moves_to_another_entity(world, tmp_path):
    qa = '{"question": "Who designed the Orsk Bridge near Lake Zog?", "answer": "Ilsa Maren"}'
    rewrite = "Who designed the bridge that crosses the Drun River near Lake Zog?"

    def pick(messages):  # picks Lake Zog until told not to
        return "Orsk Bridge" if '"Lake Zog"' in message_text(messages[0]) else "Lake Zog"

    chat = scripted(
        qa=[qa],
        pick=[pick, pick],
        rewrite=[rewrite],
        image=["Who designed the bridge that crosses the river shown in the image near Lake Zog?"],
    )
    task, _ = build(world, chat, tmp_path)
    assert task.rounds[0].entity == "Orsk Bridge"


def test_leaking_rewrites_are_rejected(world, tmp_path):
    leak = "Who designed the bridge by ILSA MAREN that crosses the Drun River?"
    chat = scripted(rewrite=[leak] * 3)
    with pytest.raises(TaskDropped) as info:
        build(world, chat, tmp_path)
    assert info.value.reason == "answer_leaked"
    # a leak once, then a clean rewrite: retried and kept
    task, writer = build(world, scripted(rewrite=[leak]), tmp_path)
    assert task.rounds[0].question_after == REWRITE and writer.stats["problems"] == {
        "answer_leaked": 1
    }


def test_image_rewrite_must_mention_the_image(world, tmp_path):
    chat = scripted(image=["Who designed the bridge that crosses a certain river?"] * 3)
    with pytest.raises(TaskDropped) as info:
        build(world, chat, tmp_path)
    assert info.value.reason == "no_image_phrase"


def served_replies():
    return [QA, "Orsk Bridge", FACT, REWRITE, "Drun River", IMAGE_REWRITE]


def test_openai_server_500_then_success(world, tmp_path):
    replies = [{"status": 500}] + served_replies()
    with ReplayChatServer(replies) as server:
        chat = OpenAIChat(
            "writer-model",
            server.base_url,
            api_key="test-key",
            max_retries=3,
            backoff_base=0.01,
            sleep=lambda s: None,
            timeout=5,
        )
        task, _ = build(world, chat, tmp_path)
        first = server.requests[1]["json"]
    assert task.question == IMAGE_REWRITE
    assert len(server.requests) == 7  # the 500 was retried by the HTTP client
    assert first["model"] == "writer-model" and "JSON object" in first["messages"][0]["content"]


def test_openai_server_errors_become_counted_reasons(world, tmp_path):
    with ReplayChatServer([{"status": 500}] * 20) as server:
        chat = OpenAIChat(
            "m",
            server.base_url,
            api_key="k",
            max_retries=1,
            backoff_base=0.01,
            sleep=lambda s: None,
            timeout=5,
        )
        with pytest.raises(TaskDropped) as info:
            build(world, chat, tmp_path, max_attempts=2)
    assert info.value.reason == "chat_error"


def test_openai_timeout_is_dropped_quickly(world, tmp_path):
    with MisbehavingServer(["hang"], then="hang", hang_s=5) as server:
        chat = OpenAIChat(
            "m",
            server.url + "/v1",
            api_key="k",
            max_retries=0,
            timeout=0.3,
            total_timeout=1.0,
            sleep=lambda s: None,
        )
        start = time.perf_counter()
        with pytest.raises(TaskDropped) as info:
            build(world, chat, tmp_path, max_attempts=2)
        assert time.perf_counter() - start < 4
    assert info.value.reason == "chat_error"


def test_stage_with_llm_writer_counts_failures(world, tmp_path):
    # every third initial QA is malformed for good: those tasks are dropped, the rest are kept
    calls = {"n": 0}

    def qa(messages):
        calls["n"] += 1
        name = message_text(messages[0]).split("Article title: ", 1)[1].split("\n", 1)[0]
        if name in ("Tulle Mill", "Brenna"):
            return "I cannot answer that."
        return json.dumps({"question": f"What is special about {name}?", "answer": "unknown thing"})

    def pick(messages):
        q = message_text(messages[0]).split("Question: ", 1)[1].split("\n", 1)[0]
        return q.split("about ", 1)[1].rstrip("?")

    def rewrite(messages):
        q = message_text(messages[0]).split("Question: ", 1)[1].split("\n", 1)[0]
        return q.split("about ", 1)[0] + "about the place described in the old records?"

    chat = scripted(qa=[qa] * 100, pick=[pick] * 100, rewrite=[rewrite] * 100)
    config = InjectConfig(
        n_train=5,
        n_heldout=1,
        n_exam=1,
        exam_rounds=1,
        rounds={"easy": 1, "medium": 1, "hard": 1},
        concurrency=4,
        progress=False,
    )
    metrics = run_inject_text(
        tmp_path / "run",
        config,
        source=world,
        writer=LLMWriter(chat),
        seed_config=SeedConfig(sitelinks_max=5, statements_min=5),
    )
    failed = list(read_jsonl(tmp_path / "run" / "inject-text" / "failed.jsonl"))
    assert metrics["failed_reasons"] == {"malformed_json": len(failed)} and len(failed) >= 1
    assert metrics["n_tasks"] + metrics["n_failed"] == 7
    assert (
        metrics["answer_invariance_rate"] is None and metrics["n_unchecked"] == metrics["n_tasks"]
    )
    assert metrics["writer_stats"]["failures"] == {"initial_qa:malformed_json": len(failed)}


def png_bytes():
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 120, 200)).save(buf, format="PNG")
    return buf.getvalue()


def mock_client(routes):
    import httpx

    from vsearcher_lite.net.http import HttpClient

    def handler(request):
        status, body, ctype = routes.get(str(request.url), (404, b"not found", "text/plain"))
        return httpx.Response(status, content=body, headers={"Content-Type": ctype})

    return HttpClient(
        "test-images", transport=httpx.MockTransport(handler), max_retries=0, sleep=lambda s: None
    )


def test_live_images_are_downloaded_checked_and_perturbed(world, tmp_path):
    from vsearcher_lite.synthesis.images import ImageDownloadError, download_image

    url = "https://upload.wikimedia.test/drun.png"
    client = mock_client(
        {
            url: (200, png_bytes(), "image/png"),
            "https://upload.wikimedia.test/page.png": (200, b"<html>nope</html>", "text/html"),
        }
    )
    assert download_image(url, tmp_path / "a.png", client=client).read_bytes() == png_bytes()
    with pytest.raises(ImageDownloadError, match="not an image"):
        download_image("https://upload.wikimedia.test/page.png", tmp_path / "b.png", client=client)
    with pytest.raises(ImageDownloadError, match="missing.png"):
        download_image(
            "https://upload.wikimedia.test/missing.png", tmp_path / "c.png", client=client
        )
    assert not (tmp_path / "b.png").exists() and not (tmp_path / "c.png").exists()

    # image injection with a URL picture: the question image is a local perturbed copy
    world._images["V1"] = url
    synth = Synthesizer(world, LLMWriter(scripted()), http_client=client)
    task = synth.text_task(seed(world), "train", "easy", 1, random.Random(0))
    task = synth.image_task(task, random.Random(1), tmp_path / "images")
    assert task.image.source_image == url and Path(task.image_path).is_file()
    world._images["V1"] = "https://upload.wikimedia.test/page.png"
    with pytest.raises(TaskDropped) as info:
        synth.image_task(
            synth.text_task(seed(world), "train", "easy", 1, random.Random(0)),
            random.Random(1),
            tmp_path / "i2",
        )
    assert info.value.reason == "image_unreadable"


def fake_llm(body):
    """A served 'model' that follows the writer's prompts just well enough for one round."""
    text = body["messages"][0]["content"]
    if "Article title: " in text:
        title = text.split("Article title: ", 1)[1].split("\n", 1)[0]
        return json.dumps({"question": f"What is the history of {title}?", "answer": "a quiet one"})
    if "Choose one named entity" in text:
        return text.split("Question: What is the history of ", 1)[1].split("?\n", 1)[0]
    if "choose ONE fact" in text:
        entity = text.split('Article about "', 1)[1].split('"', 1)[0]
        return f"{entity} was surveyed by Hal Brun in 1911."
    if "Entity to hide" in text:
        return "What is the history of the place surveyed by Hal Brun in 1911?"
    return "I do not know."


def test_cli_llm_writer_against_a_served_model(tmp_path_factory, tmp_path):
    from test_synth_support import copy_run, small_sandbox

    from vsearcher_lite.cli import main

    run = copy_run(small_sandbox(tmp_path_factory), tmp_path / "run")
    with ReplayChatServer([fake_llm] * 100) as server:
        code = main(
            [
                "inject-text",
                "--run-dir",
                str(run),
                "--writer",
                "llm",
                "--chat",
                f"openai:writer@{server.base_url}",
                "--n-train",
                "2",
                "--n-heldout",
                "0",
                "--n-exam",
                "0",
                "--mix",
                "1:0:0",
                "--concurrency",
                "2",
                "--onehop-train",
                "0",
                "--onehop-heldout",
                "0",
                "--warmup-levels",
                "none",
            ]
        )
        n_requests = len(server.requests)
    assert code == 0
    metrics = json.loads((run / "inject-text" / "metrics.json").read_text())
    assert metrics["writer"] == "llm" and metrics["n_tasks_by_difficulty"]["easy"] == 2
    assert metrics["chat_usage"]["requests"] == n_requests == 8  # 4 operations per one-round task
    task = next(read_jsonl(run / "inject-text" / "tasks.jsonl"))
    assert task["question"] == "What is the history of the place surveyed by Hal Brun in 1911?"
    assert task["rounds"][0]["fact"]["kind"] == "text"
