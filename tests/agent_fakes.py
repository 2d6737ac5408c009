"""Small fake tool backends shared by the agent tests (no sandbox world needed)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from vsearcher_lite.agent.loop import run_episode
from vsearcher_lite.agent.protocol import format_assistant_turn
from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat import ScriptedChat
from vsearcher_lite.tools.base import (
    ImageHit,
    ImageSearchBackend,
    PageReader,
    SearchHit,
    Summariser,
    TextSearchBackend,
    ToolError,
)
from vsearcher_lite.tools.toolbox import Toolbox
from vsearcher_lite.world.model import ImageRef, PageContent


class FakeText(TextSearchBackend):
    def search(self, query, k=5):
        return [
            SearchHit(f"https://wiki.sandbox.test/wiki/P{i}", f"Page {i}", f"{query} snippet {i}")
            for i in range(k)
        ]


class FakeImage(ImageSearchBackend):
    def __init__(self, hit_images):
        self.hit_images = list(hit_images)

    def search(self, image, k=5):
        return [
            ImageHit(f"https://wiki.sandbox.test/wiki/H{i}", f"Hit {i}", ImageRef(p), 0.9 - i / 10)
            for i, p in enumerate(self.hit_images[:k])
        ]


class FakeReader(PageReader):
    def read(self, url):
        if "missing" in url:
            raise ToolError(f"no page at {url}")
        return PageContent(url, "Tope", ["Tope was founded in 1874.", "It is a town."])


class FirstParagraph(Summariser):
    def summarise(self, page, goal):
        return page.paragraphs[0]


def make_images(folder: Path, n_hits: int = 2) -> tuple[str, list[str]]:
    folder.mkdir(parents=True, exist_ok=True)
    q = folder / "question.jpg"
    Image.new("RGB", (16, 16), "red").save(q)
    hits = []
    for i in range(n_hits):
        p = folder / f"hit{i}.png"
        Image.new("RGB", (16, 16), (0, 40 * i, 200)).save(p)
        hits.append(str(p))
    return str(q), hits


def make_toolbox(hit_images, cache=None) -> Toolbox:
    return Toolbox(FakeText(), FakeImage(hit_images), FakeReader(), FirstParagraph(), cache=cache)


def call(name, args=None, think="Next step."):
    return format_assistant_turn(think, tool_call=(name, args or {}))


def answer(text, think="Found it."):
    return format_assistant_turn(think, answer=text)


def sample_trajectory(folder: Path, task_id: str = "t1", difficulty: str = "easy", n_hits: int = 2):
    """A finished trajectory with a question image, an image search (with images) and a visit."""
    q, hits = make_images(folder, n_hits)
    task = Task(
        id=task_id,
        question="In which year was the town shown in the image founded?",
        answer="1874",
        image_path=q,
        difficulty=difficulty,
    )
    policy = ScriptedChat(
        [
            call("image_search"),
            call("visit", {"url": "https://wiki.sandbox.test/wiki/Tope", "goal": "founding year"}),
            answer("1874"),
        ]
    )
    traj = run_episode(policy, make_toolbox(hits), task)
    traj.meta.update({"answer": "1874", "difficulty": difficulty, "correct": True})
    return traj


# ---------------------------------------------------------------------------------------------
# A small sandbox run shared by the teacher and trajectory tests (built once per session)

SMALL_WORLD_ENTITIES = 400  # builds in about 3 s and still yields easy, medium and hard tasks
_SANDBOX_RUNS: dict[str, Path] = {}


def build_sandbox_run(root: Path) -> Path:
    """A run dir with a small world and synthesized image tasks (unfiltered, every difficulty)."""
    key = "small"
    if key in _SANDBOX_RUNS and _SANDBOX_RUNS[key].exists():
        return _SANDBOX_RUNS[key]
    from vsearcher_lite.synthesis.filters import run_filter
    from vsearcher_lite.synthesis.inject import InjectConfig
    from vsearcher_lite.world.store import ensure_world

    run = root / "sandbox_run"
    ensure_world(run, SMALL_WORLD_ENTITIES, 0)
    run_filter(run, inject_config=InjectConfig(n_train=40, n_heldout=0, n_exam=0, progress=False))
    _SANDBOX_RUNS[key] = run
    return run


def image_tasks(run: Path) -> list:
    """Every image task of the run, before filtering (so all three difficulties are present)."""
    from vsearcher_lite.synthesis.trajectories import load_tasks

    return load_tasks(run / "inject-image" / "tasks.jsonl")


def sandbox_toolbox(run: Path, top_k: int = 3, cache=None, style: str = "full") -> Toolbox:
    from vsearcher_lite.tools.sandbox import sandbox_backends
    from vsearcher_lite.world.store import open_world

    b = sandbox_backends(open_world(run), style)
    return Toolbox(b["text"], b["image"], b["reader"], b["summariser"], cache=cache, top_k=top_k)


def fresh_run(base: Path, tmp_path: Path) -> Path:
    """A run folder of its own that shares ``base``'s built world and copies its synthesized
    tasks."""
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    (run / "world").symlink_to(base / "world")
    shutil.copytree(base / "filter", run / "filter")
    shutil.copytree(base / "inject-image", run / "inject-image")
    return run


def grpo_run(base: Path, run: Path) -> Path:
    """A GRPO-ready run folder at ``run`` over ``base``'s world (``build_sandbox_run``): six easy
    kept training tasks as both SFT's tasks and the RL pool, three as held-out tasks, and the tiny
    base standing in for the SFT checkpoint."""
    import json

    from vsearcher_lite.model.tiny import default_base_dir
    from vsearcher_lite.runio import RunDir, write_jsonl

    run.mkdir()
    (run / "world").symlink_to(base / "world")
    (run / "filter").mkdir()
    # every kept training task, its image named where it is (in base's run folder)
    tasks = [
        RunDir(base).resolve(json.loads(line))
        for name in ("train", "rl_tasks")
        for line in (base / "filter" / f"{name}.jsonl").read_text().splitlines()
        if line.strip()
    ]
    easy = [t for t in tasks if t["difficulty"] == "easy"]
    write_jsonl(run / "filter" / "train.jsonl", easy[:6])
    write_jsonl(run / "filter" / "rl_tasks.jsonl", easy[:6])  # the RL pool, GRPO's default source
    write_jsonl(
        run / "filter" / "heldout.jsonl",
        [{**t, "id": f"heldout-{t['id']}", "split": "heldout"} for t in easy[6:9]],
    )
    (run / "sft").mkdir()
    (run / "sft" / "checkpoint").symlink_to(default_base_dir())
    return run


# ---------------------------------------------------------------------------------------------
# SFT data in TRL's export format


def sft_record(image: str, hit: str, year: str) -> dict:
    """An accepted trajectory as ``agent.export.to_trl_record`` writes it (compact prompt, so rows
    stay short): an image search whose response holds an image, then the answer."""
    from vsearcher_lite.agent.protocol import initial_messages, text_part

    messages = initial_messages("In which year was the bridge in the image built?", image,
                                variant="compact", today="2025-09-01")
    messages += [
        {"role": "assistant", "content": call("image_search", think="Search by image.")},
        {"role": "user", "content": [text_part("<tool_response>\n1. Trel Bridge\n"),
                                     {"type": "image", "image": hit},
                                     text_part("</tool_response>")]},
        {"role": "assistant", "content": answer(year, think=f"Trel Bridge was built in {year}.")},
    ]

    def parts(m):
        c = m["content"]
        if isinstance(c, str):
            return [{"type": "text", "text": c}]
        return [{"type": "image"} if p["type"] == "image" else {"type": "text", "text": p["text"]}
                for p in c]

    return {"messages": [{"role": m["role"], "content": parts(m)} for m in messages],
            "images": [image, hit]}


def write_sft_file(folder: Path, n: int) -> Path:
    """``n`` two-image trajectories (``sft_record``) as ``folder/sft_trl.jsonl``."""
    import json

    question, hits = make_images(folder, n_hits=n)
    years = ("1874", "1912", "1755", "1990", "1801", "1633", "1999", "1710")
    rows = [sft_record(question, hits[i], years[i % len(years)]) for i in range(n)]
    path = folder / "sft_trl.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def scripted_batcher(reply, reply_prefix: str = ""):
    """A ``LockstepBatcher`` class whose every episode replies by ``reply`` (a function of the
    messages), to stand in for ``BatchedTransformersChat`` where a policy must call tools;
    ``reply_prefix`` as a chat template's generation prompt would set it."""
    from vsearcher_lite.chat import ScriptedChat
    from vsearcher_lite.chat.batched import LockstepBatcher

    class ScriptedBatcher(LockstepBatcher):
        def __init__(self, *args, **kwargs):
            super().__init__(max_batch=kwargs.get("max_batch", 8))
            self.script = ScriptedChat(reply)
            self.reply_prefix = reply_prefix

        def generate_batch(self, conversations, options, seed):
            return [self.script.chat(c) for c in conversations]

    return ScriptedBatcher
