import json

import pytest

from vsearcher_lite.runio import InputError, JsonlLog, RunDir, atomic_write_json, read_jsonl


def test_read_jsonl_names_the_bad_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"id": 1}\n{"id": 2,\n{"id": 3}\n')
    with pytest.raises(InputError, match=r"x.jsonl:2"):
        list(read_jsonl(p))


def test_read_jsonl_rejects_non_objects_and_missing_files(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("[1, 2]\n")
    with pytest.raises(InputError, match="expected a JSON object"):
        list(read_jsonl(p))
    with pytest.raises(InputError, match="file not found"):
        list(read_jsonl(tmp_path / "missing.jsonl"))


def test_jsonl_log_resumes_and_repairs_a_torn_last_line(tmp_path):
    p = tmp_path / "log.jsonl"
    log = JsonlLog(p)
    log.append({"id": "a", "v": 1})
    log.append({"id": "b", "v": 2})
    with p.open("a") as fh:  # a crash in the middle of writing record "c"
        fh.write('{"id": "c", "v"')
    again = JsonlLog(p)
    assert "a" in again and "b" in again and "c" not in again
    again.append({"id": "c", "v": 3})
    assert [r["id"] for r in read_jsonl(p)] == ["a", "b", "c"]


def test_jsonl_log_makes_its_folder_only_to_append(tmp_path):
    p = tmp_path / "not" / "yet" / "log.jsonl"
    log = JsonlLog(p)
    assert log.records() == [] and len(log) == 0 and "a" not in log
    assert not (tmp_path / "not").exists()  # reading a log that does not exist creates nothing
    log.append({"id": "a"})
    assert [r["id"] for r in read_jsonl(p)] == ["a"]


def test_atomic_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "m.json"
    atomic_write_json(target, {"x": 1})
    atomic_write_json(target, {"x": 2})
    assert json.loads(target.read_text()) == {"x": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_atomic_write_keeps_the_old_file_when_serialisation_fails(tmp_path):
    target = tmp_path / "m.json"
    atomic_write_json(target, {"x": 1})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"x": object()})
    assert json.loads(target.read_text()) == {"x": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_run_dir_metrics_and_require(tmp_path):
    run = RunDir(tmp_path / "run")
    run.write_metrics("world", {"n": 3})
    assert run.read_metrics("world") == {"n": 3}
    with pytest.raises(InputError, match="vsearcher-lite seeds"):
        run.require("seeds", "vsearcher-lite seeds")


def test_atomic_write_makes_readable_files(tmp_path):
    import stat

    target = tmp_path / "m.json"
    atomic_write_json(target, {"x": 1})
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_replace_dir_swaps_folders_whole(tmp_path):
    from vsearcher_lite.runio import replace_dir

    target = tmp_path / "ckpt"
    target.mkdir()
    (target / "old.txt").write_text("old")
    new = tmp_path / ".ckpt.tmp"
    new.mkdir()
    (new / "new.txt").write_text("new")
    replace_dir(new, target)
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_run_files_name_paths_relative_to_the_run_folder(tmp_path):
    run = RunDir(tmp_path / "run")
    inside = str(tmp_path / "run" / "inject-image" / "images" / "t1.jpg")
    checkpoint = tmp_path / "run" / "sft" / "checkpoint"
    record = {
        "image_path": inside,
        "spec": f"transformers:{checkpoint}",
        "run": str(tmp_path / "run"),
        "sibling": str(tmp_path / "run2" / "x.jpg"),
        "base": "/opt/data/tiny_base",
        "model": "Qwen/Qwen2.5-VL-3B-Instruct",
        "url": "https://example.test/a.jpg",
        "n": 3,
        "images": [inside, None],
    }
    relative = "inject-image/images/t1.jpg"
    expected = {
        **record,
        "image_path": relative,
        "run": ".",
        "spec": "transformers:sft/checkpoint",
        "images": [relative, None],
    }
    assert run.relative(record) == expected
    # a run folder named relative to the working folder
    assert RunDir("runs/a").relative("runs/a/eval/images/x.png") == "eval/images/x.png"


def test_stored_paths_resolve_in_the_run_folder_where_it_is_now(tmp_path):
    run, moved = RunDir(tmp_path / "moved"), tmp_path / "moved"
    old = {"image_path": "/old/run/inject-image/images/t1.jpg"}  # an older run's absolute path
    stored = {
        "image_path": "inject-image/images/t1.jpg",
        "question": "which town?",
        "answer": "world/x",
        "image": {"source_image": "world/images/I1.png"},
        "messages": [{"content": [{"type": "image", "image": "world/images/I2.png"}]}],
        "observation": {"images": [{"location": "world/images/I3.png"}]},
        "old": old,
        "url": {"location": "https://example.test/a.jpg"},
        "none": {"image_path": None},
    }
    got = run.resolve(stored)
    assert got["image_path"] == str(moved / "inject-image" / "images" / "t1.jpg")
    assert got["image"]["source_image"] == str(moved / "world" / "images" / "I1.png")
    assert got["messages"][0]["content"][0]["image"] == str(moved / "world" / "images" / "I2.png")
    assert got["observation"]["images"][0]["location"] == str(moved / "world" / "images" / "I3.png")
    assert [got[k] for k in ("old", "url", "none")] == [stored[k] for k in ("old", "url", "none")]
    # only path fields hold paths
    assert got["question"] == "which town?" and got["answer"] == "world/x"
    assert run.resolve(run.relative(got)) == got
