"""Bad input gets one clear error that names the file, line, field or option, and leaves nothing
behind.

Each case feeds the CLI or a library entry point one bad input and checks that it is refused with
a message a user can act on: no Python traceback, the right line number, no silently accepted
value, no half-written file left behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsearcher_lite.runio import InputError, read_jsonl, read_jsonl_numbered, read_text


def _write(path: Path, data: bytes | str) -> Path:
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


def test_non_utf8_text_names_the_line(tmp_path):
    bad = _write(tmp_path / "bin.jsonl", b'{"a": 1}\n{"b": "caf\xe9"}\n')
    with pytest.raises(InputError, match=r"bin\.jsonl:2: not UTF-8 text \(byte 19"):
        list(read_jsonl(bad))
    with pytest.raises(InputError, match="is a folder"):
        read_text(tmp_path)


def test_jsonl_line_numbers_count_blank_lines_and_keep_u2028_inside_strings(tmp_path):
    path = _write(tmp_path / "x.jsonl", '\n{"id": 1}\n\n{"id": 2, "text": "a\u2028b"}\n')
    assert [(n, r["id"]) for n, r in read_jsonl_numbered(path)] == [(2, 1), (4, 2)]
    assert list(read_jsonl(path))[1]["text"] == "a\u2028b"


def test_sft_records_name_the_file_line(tmp_path):
    from vsearcher_lite.training.data import load_sft_records

    good = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        ],
        "images": [],
    }
    path = _write(
        tmp_path / "sft.jsonl", "\n" + json.dumps(good) + "\n" + json.dumps({"messages": 5}) + "\n"
    )
    with pytest.raises(InputError, match=r"sft\.jsonl:3:"):
        load_sft_records(path)
    with pytest.raises(InputError, match="is a folder"):
        load_sft_records(tmp_path)


def test_format_check_rejects_folders_empty_files_and_non_text_content(tmp_path):
    from vsearcher_lite.agent.commands import format_check_file

    with pytest.raises(InputError, match="is a folder"):
        format_check_file(tmp_path)
    with pytest.raises(InputError, match="no records"):
        format_check_file(_write(tmp_path / "empty.jsonl", "\n"))
    bad = _write(
        tmp_path / "int.jsonl",
        json.dumps({"messages": [{"role": "assistant", "content": 5}]}) + "\n",
    )
    with pytest.raises(
        InputError, match=r"int\.jsonl:1: assistant message 0: content must be text"
    ):
        format_check_file(bad)


@pytest.mark.parametrize("field,value", [("question", 5), ("difficulty", ["x"]), ("split", 3)])
def test_benchmark_task_fields_must_be_text(tmp_path, field, value):
    from PIL import Image

    from vsearcher_lite.evaluation.benchmarks import check_benchmark

    image = tmp_path / "q.png"
    Image.new("RGB", (8, 8)).save(image)
    row = {
        "id": "t1",
        "question": "Which town?",
        "answer": "Lenith",
        "image_path": str(image),
        "difficulty": "easy",
        "split": "heldout",
    }
    row[field] = value
    path = _write(tmp_path / "b.jsonl", json.dumps(row) + "\n")
    with pytest.raises(InputError, match=rf"b\.jsonl:1.*'{field}' must be text"):
        check_benchmark(path)


def test_settings_out_of_range_are_refused_before_any_work():
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.runtime import set_threads
    from vsearcher_lite.scoring.evaluate import EvalConfig
    from vsearcher_lite.training.config import SFTConfig

    with pytest.raises(ValueError, match="threads must be at least 1"):
        set_threads(-1)
    for bad in (
        dict(name="../escape"),
        dict(name="a/b"),
        dict(eval_max_tasks=0),
        dict(epochs=0),
        dict(max_train_samples=0),
        dict(threads=-1),
        dict(max_length=-1),
    ):
        with pytest.raises(ValueError):
            SFTConfig.for_profile("cpu", **bad)
    for bad in (dict(name=".."), dict(temperature=-1.0), dict(top_p=0.0), dict(eval_max_tasks=-1)):
        with pytest.raises(ValueError):
            GRPOConfig.for_profile("cpu", **bad)
    for bad in (dict(temperature=-0.5), dict(max_tool_calls=-1), dict(max_tokens=0)):
        with pytest.raises(ValueError):
            EvalConfig.for_profile("cpu", **bad)
    assert SFTConfig.for_profile("cpu", name="sft-v2").name == "sft-v2"


def test_chat_specs_with_a_bad_url_or_a_missing_folder(tmp_path):
    from vsearcher_lite.backends.chat import make_chat
    from vsearcher_lite.scoring.policies import _chat_from_spec

    for spec in ("openai:m@notaurl", "openai:m@ftp://host/v1"):
        with pytest.raises(InputError, match="must start with http"):
            make_chat(spec)
    assert make_chat("openai:m@http://127.0.0.1:9/v1").model == "m"
    with pytest.raises(InputError, match="no model here"):
        _chat_from_spec(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no model here"):
        _chat_from_spec(str(tmp_path / "empty"))
    with pytest.raises(InputError, match="needs a model folder"):
        _chat_from_spec("transformers:")


def test_seed_shares_must_leave_training_seeds():
    from vsearcher_lite.synthesis.seeds import SeedConfig, assign_pools

    with pytest.raises(InputError, match="exam_share and heldout_share"):
        assign_pools([], SeedConfig(exam_share=2.0))
    with pytest.raises(InputError, match="exam_share and heldout_share"):
        assign_pools([], SeedConfig(exam_share=0.6, heldout_share=0.5))


def test_cli_refuses_bad_numbers_and_empty_policies_in_one_line(capsys, tmp_path):
    from vsearcher_lite.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["tools", "--top-k", "0", "text-search", "x"])
    assert exc.value.code == 2
    assert "--top-k" in capsys.readouterr().err
    assert main(["eval", "--run-dir", str(tmp_path / "run"), "--policy", " "]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--policy is empty" in err
    assert not (tmp_path / "run").exists()


def test_failed_evaluation_leaves_nothing_behind(tmp_path):
    """No world in the run folder: the error comes before config.json or the tool cache is
    written."""
    from vsearcher_lite.agent.task import Task
    from vsearcher_lite.scoring.evaluate import EvalConfig, evaluate

    run = tmp_path / "run"
    task = Task(
        id="t1", question="Which town?", answer="Lenith", image_path=None, difficulty="easy"
    )
    with pytest.raises(InputError, match="no sandbox world"):
        evaluate(
            run, [task], "teacher", name="t", config=EvalConfig.for_profile("cpu", progress=False)
        )
    assert not (run / "eval" / "t").exists() and not (run / "cache").exists()


def test_failed_benchmark_evaluation_leaves_no_image_cache_folder(tmp_path, capsys):
    """A benchmark whose images are local files needs no cache; a failed run (no world) must not
    leave an empty ``eval/images`` behind (the image cache made its folder when it was opened)."""
    from PIL import Image

    from vsearcher_lite.cli import main

    Image.new("RGB", (8, 8), "red").save(tmp_path / "q.png")
    bench = _write(
        tmp_path / "exam.jsonl",
        json.dumps(
            {
                "question": "Which town is shown?",
                "answer": "Lenith",
                "image_path": str(tmp_path / "q.png"),
            }
        )
        + "\n",
    )
    run = tmp_path / "run"
    assert (
        main(["eval", "--run-dir", str(run), "--benchmark", str(bench), "--policy", "teacher"]) == 2
    )
    assert "no sandbox world" in capsys.readouterr().err
    assert not (run / "eval").exists()


def test_the_image_cache_makes_its_folder_only_to_store(tmp_path):
    from PIL import Image

    from vsearcher_lite.evaluation.benchmarks import ImageCache

    png = tmp_path / "q.png"
    Image.new("RGB", (8, 8), "blue").save(png)
    folder = tmp_path / "cache" / "images"
    ImageCache(folder)
    assert not folder.exists()
    cache = ImageCache(folder, fetch=lambda url: png.read_bytes())
    first = cache.fetch_url("https://example.org/q.png")
    assert first.parent == folder and first.read_bytes() == png.read_bytes()
    again = ImageCache(folder, fetch=lambda url: pytest.fail("downloaded twice"))
    assert again.fetch_url("https://example.org/q.png") == first and again.stats["reused"] == 1


def test_failed_sft_leaves_no_stage_folder(tmp_path):
    from vsearcher_lite.training.config import SFTConfig
    from vsearcher_lite.training.sft import run_sft

    bad = _write(tmp_path / "bad.jsonl", '{"messages": 5}\n')
    run = tmp_path / "run"
    config = SFTConfig.for_profile("cpu", train_file=str(bad), evaluate=False, max_steps=1)
    with pytest.raises(InputError, match=r"bad\.jsonl:1"):
        run_sft(run, config, log=lambda _: None)
    assert not (run / "sft").exists()


def test_benchmark_files_of_an_unknown_type_are_refused(tmp_path):
    from vsearcher_lite.evaluation.benchmarks import check_benchmark

    path = _write(tmp_path / "rows.csv", "question,answer\nWhich town?,Lenith\n")
    with pytest.raises(InputError, match=r"rows\.csv: unsupported file type '\.csv'"):
        check_benchmark(path)
