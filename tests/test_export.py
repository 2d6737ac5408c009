"""Exports: TRL chat format, LLaMA-Factory ShareGPT (+ dataset_info.json), plain JSONL."""

import json
from pathlib import Path

import pytest
from agent_fakes import sample_trajectory

from vsearcher_lite.agent.export import (
    IMAGE_TOKEN,
    export_trajectories,
    llamafactory_dataset_info,
    sharegpt_problems,
    to_sharegpt_record,
    to_trl_record,
    trajectory_images,
)


@pytest.fixture
def trajs(tmp_path):
    return [
        sample_trajectory(tmp_path / "a", "t1", "easy", n_hits=2),
        sample_trajectory(tmp_path / "b", "t2", "hard", n_hits=3),
    ]


def test_trl_record_has_one_placeholder_per_image_in_order(trajs):
    rec = to_trl_record(trajs[0])
    placeholders = [p for m in rec["messages"] for p in m["content"] if p["type"] == "image"]
    assert len(placeholders) == len(rec["images"]) == 3  # question image + two hit images
    assert all(p == {"type": "image"} for p in placeholders)
    assert rec["images"][0].endswith("question.jpg") and Path(rec["images"][0]).is_absolute()
    assert all(isinstance(m["content"], list) for m in rec["messages"])
    assert rec["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": trajs[0].messages[-1]["content"]}],
    }


def test_trl_record_goes_through_trl_and_the_qwen3_vl_template(trajs):
    jinja2 = pytest.importorskip("jinja2")
    import trl
    from trl.data_utils import prepare_multimodal_messages

    rec = to_trl_record(trajs[0])
    filled = prepare_multimodal_messages(rec["messages"], images=rec["images"])
    assert [p["image"] for m in filled for p in m["content"] if p["type"] == "image"] == rec[
        "images"
    ]
    template = (Path(trl.__file__).parent / "chat_templates" / "qwen3_vl.jinja").read_text()
    env = jinja2.Environment()
    env.filters["tojson"] = lambda v, **kw: json.dumps(v)
    text = env.from_string(template).render(messages=filled, add_generation_prompt=False)
    assert text.count("<|image_pad|>") == len(rec["images"])
    assert "<|im_start|>user\n<tool_response>\nPages that contain a similar image:" in text
    assert text.rstrip().endswith("<answer>1874</answer><|im_end|>")
    assert text.count("<|im_start|>assistant\n<think>") == 3


def test_sharegpt_record_is_valid_and_problems_are_caught(trajs):
    rec = to_sharegpt_record(trajs[1])
    assert sharegpt_problems(rec) == []
    assert rec["messages"][1]["content"].startswith(IMAGE_TOKEN)  # the question image comes first
    assert sum(m["content"].count(IMAGE_TOKEN) for m in rec["messages"]) == len(rec["images"]) == 4

    two_assistants = {**rec, "messages": rec["messages"][:3] + rec["messages"][2:]}
    assert any("expected 'user'" in p for p in sharegpt_problems(two_assistants))
    ends_on_user = {**rec, "messages": rec["messages"][:-1]}
    assert "the conversation does not end on an assistant turn" in sharegpt_problems(ends_on_user)
    fewer_images = {**rec, "images": rec["images"][:-1]}
    assert sharegpt_problems(fewer_images) == [f"4 {IMAGE_TOKEN} token(s) but 3 image(s)"]
    assert sharegpt_problems({"messages": []}) == ["no messages"]


def test_export_writes_three_formats_and_copies_images(trajs, tmp_path):
    out = tmp_path / "export"
    info = export_trajectories(trajs, out)
    assert (
        info["n_exported"] == 2 and info["invalid_sharegpt"] == [] and info["missing_images"] == []
    )
    lf = json.loads((out / "llamafactory" / "trajectory.json").read_text())
    assert len(lf) == 2
    for rec in lf:
        assert sharegpt_problems(rec) == []
        for name in rec["images"]:
            assert name.startswith("images/") and (out / "llamafactory" / name).is_file()
    dataset_info = json.loads((out / "llamafactory" / "dataset_info.json").read_text())
    assert dataset_info == llamafactory_dataset_info("trajectory.json")
    entry = dataset_info["trajectory"]
    assert entry["formatting"] == "sharegpt" and entry["columns"] == {
        "messages": "messages",
        "images": "images",
    }
    assert entry["tags"]["system_tag"] == "system" and entry["tags"]["assistant_tag"] == "assistant"
    # images are stored once per content: the two fake trajectories draw identical pictures
    n_paths = len({p for t in trajs for p in trajectory_images(t)})
    n_contents = len({Path(p).read_bytes() for t in trajs for p in trajectory_images(t)})
    assert n_paths == 7 and n_contents == 4
    assert len(list((out / "llamafactory" / "images").iterdir())) == n_contents == info["n_images"]


def test_exports_load_with_datasets(trajs, tmp_path):
    datasets = pytest.importorskip("datasets")
    from trl.data_utils import prepare_multimodal_messages

    out = tmp_path / "export"
    export_trajectories(trajs, out)
    plain = datasets.load_dataset("json", data_files=str(out / "trajectories.jsonl"), split="train")
    assert plain.num_rows == 2 and plain[0]["task_id"] == "t1" and plain[1]["difficulty"] == "hard"
    assert (
        plain[0]["n_tool_calls"] == 2
        and json.loads(plain[0]["tool_calls"][1]["arguments"])["goal"] == "founding year"
    )
    assert plain[0]["correct"] is True and plain[0]["messages"][0]["role"] == "system"

    trl_rows = datasets.load_dataset("json", data_files=str(out / "sft_trl.jsonl"), split="train")
    row = trl_rows[1]
    assert row["level"] == "hard"  # what the SFT stage counts its kept and dropped ones by
    # Arrow adds the missing "text" key (None) to image parts; TRL must still fill every placeholder
    filled = prepare_multimodal_messages(row["messages"], images=row["images"])
    assert sum(
        1 for m in filled for p in m["content"] if p["type"] == "image" and p.get("image")
    ) == len(row["images"])
