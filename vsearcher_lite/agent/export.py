"""Exports of accepted trajectories for supervised fine-tuning (paper 2.2, A.3).

- **TRL** (``sft_trl.jsonl``) for ``SFTTrainer``: every content is a list of parts, so one Arrow
  column holds every message; the tool block is in the system text, so no ``tools`` column.
- **LLaMA-Factory ShareGPT** (``llamafactory/``), what the paper trained with: string contents
  with an ``<image>`` token per image, the images copied beside the data.
- **Plain JSONL** (``trajectories.jsonl``) for ``datasets.load_dataset("json", ...)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from vsearcher_lite.agent.loop import Trajectory
from vsearcher_lite.agent.protocol import content_with_placeholders, message_images
from vsearcher_lite.runio import RunDir, atomic_write_json, write_jsonl

IMAGE_TOKEN = "<image>"  # LLaMA-Factory's image placeholder
LLAMAFACTORY_DATASET = "trajectory"  # the dataset name in the upstream training yaml (C.4)


def as_trajectory(t: Trajectory | dict) -> Trajectory:
    return t if isinstance(t, Trajectory) else Trajectory.from_dict(t)


def trajectory_images(traj: Trajectory | dict) -> list[str]:
    """Every image of the conversation, in order of appearance."""
    traj = as_trajectory(traj)
    return [loc for m in traj.messages for loc in message_images(m)]


def _parts(message: dict) -> list[dict]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out = []
    for part in content or []:
        if part.get("type") == "image":
            out.append({"type": "image"})
        elif part.get("type") == "text":
            out.append({"type": "text", "text": str(part.get("text", ""))})
    return out


def to_trl_record(traj: Trajectory | dict, *, resolve: bool = True) -> dict:
    """One TRL ``SFTTrainer`` example: list-of-parts messages and ``images``, and the task's
    ``level`` where it has one (the SFT stage counts what it keeps and drops by level)."""
    traj = as_trajectory(traj)
    images = trajectory_images(traj)
    if resolve:
        images = [str(Path(p).resolve()) for p in images]
    record = {"messages": [{"role": m["role"], "content": _parts(m)} for m in traj.messages],
              "images": images}
    level = (traj.meta or {}).get("difficulty")
    if level:
        record["level"] = str(level)
    return record


def placeholder_messages(traj: Trajectory) -> list[dict]:
    """The messages with string contents, each image an ``IMAGE_TOKEN``."""
    return [{"role": m["role"], "content": content_with_placeholders(m, IMAGE_TOKEN)}
            for m in traj.messages]


def to_sharegpt_record(traj: Trajectory | dict, image_names: dict[str, str] | None = None) -> dict:
    """One LLaMA-Factory ShareGPT example; ``image_names``: image path -> exported name."""
    traj, names = as_trajectory(traj), image_names or {}
    return {"messages": placeholder_messages(traj),
            "images": [names.get(p, p) for p in trajectory_images(traj)]}


def llamafactory_dataset_info(file_name: str = "trajectory.json",
                              name: str = LLAMAFACTORY_DATASET) -> dict:
    """The ``dataset_info.json`` entry that makes LLaMA-Factory read the export (upstream C.3)."""
    return {
        name: {
            "file_name": file_name,
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {
                "role_tag": "role",
                "content_tag": "content",
                "user_tag": "user",
                "assistant_tag": "assistant",
                "system_tag": "system",
            },
        }
    }


def sharegpt_problems(record: dict) -> list[str]:
    """What LLaMA-Factory's ShareGPT loader would reject in one record; empty when it is valid."""
    problems = []
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["no messages"]
    body = messages[1:] if messages[0].get("role") == "system" else messages
    for i, m in enumerate(body):
        expected = "user" if i % 2 == 0 else "assistant"
        if m.get("role") != expected:
            index = i + len(messages) - len(body)
            problems.append(f"message {index} has role {m.get('role')!r}, expected {expected!r}")
            break
    if not body or len(body) % 2 != 0 or body[-1].get("role") != "assistant":
        problems.append("the conversation does not end on an assistant turn")
    if any(not isinstance(m.get("content"), str) for m in messages):
        problems.append("a content is not a string")
    n_tokens = sum(str(m.get("content", "")).count(IMAGE_TOKEN) for m in messages)
    images = record.get("images", [])
    if n_tokens != len(images):
        problems.append(f"{n_tokens} {IMAGE_TOKEN} token(s) but {len(images)} image(s)")
    return problems


def to_plain_record(traj: Trajectory | dict) -> dict:
    """A flat record: scalars, tool calls with JSON-string arguments, string contents."""
    traj = as_trajectory(traj)
    meta = traj.meta or {}
    return {
        "id": f"{traj.task_id}#{traj.sample_index}",
        "task_id": traj.task_id,
        "sample_index": traj.sample_index,
        "difficulty": str(meta.get("difficulty", "")),
        "question": traj.question,
        "image": traj.image_path or "",
        "answer": str(meta.get("answer", "")),
        "prediction": traj.prediction or "",
        "correct": bool(meta.get("correct", False)),
        "termination": traj.termination,
        "n_tool_calls": traj.n_tool_calls,
        "tool_calls": [
            {"name": t.tool,
             "arguments": json.dumps(t.arguments, ensure_ascii=False, sort_keys=True)}
            for t in traj.tool_calls
        ],
        "messages": placeholder_messages(traj),
        "images": trajectory_images(traj),
    }


def exported_image_name(path: str) -> str:
    """A stable, collision-free file name for an image: a content hash prefix plus its base name."""
    p = Path(path)
    data = p.read_bytes() if p.exists() else path.encode()
    digest = hashlib.sha256(data).hexdigest()[:12]
    return f"{digest}_{p.name}"


def copy_image(source: str | Path, target: Path) -> bool:
    """Copy ``source`` to ``target`` atomically unless a file of its size is there (one cut short
    by an older export is replaced); ``True`` when copied."""
    source, target = Path(source), Path(target)
    if target.is_file() and target.stat().st_size == source.stat().st_size:
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def export_trajectories(trajectories: Iterable[Trajectory | dict], out_dir: str | Path, *,
                        run_dir: str | Path | None = None) -> dict:
    """Write the three exports into ``out_dir``; returns their paths and counts."""
    out_dir = Path(out_dir)
    relative = RunDir(run_dir).relative if run_dir is not None else (lambda value: value)
    trajs = [as_trajectory(t) for t in trajectories]
    trl_path = write_jsonl(out_dir / "sft_trl.jsonl", (relative(to_trl_record(t)) for t in trajs))
    plain_path = write_jsonl(out_dir / "trajectories.jsonl",
                             (relative(to_plain_record(t)) for t in trajs))

    lf_dir = out_dir / "llamafactory"
    (lf_dir / "images").mkdir(parents=True, exist_ok=True)
    names: dict[str, str] = {}
    missing = []
    for path in dict.fromkeys(p for t in trajs for p in trajectory_images(t)):
        name = "images/" + exported_image_name(path)
        names[path] = name
        if Path(path).exists():
            copy_image(path, lf_dir / name)
        else:
            missing.append(path)
    records = [to_sharegpt_record(t, names) for t in trajs]
    invalid = [i for i, r in enumerate(records) if sharegpt_problems(r)]
    atomic_write_json(lf_dir / "trajectory.json", records)
    atomic_write_json(lf_dir / "dataset_info.json", llamafactory_dataset_info("trajectory.json"))
    return {
        "n_exported": len(trajs),
        "n_images": len(set(names.values())),  # distinct files: identical images are stored once
        "missing_images": missing,
        "invalid_sharegpt": invalid,
        "trl": str(trl_path),
        "plain": str(plain_path),
        "llamafactory": str(lf_dir / "trajectory.json"),
        "llamafactory_dataset_info": str(lf_dir / "dataset_info.json"),
    }
