"""A run folder moved to another place: stages refuse it, ``relocate`` rewrites its paths."""

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from vsearcher_lite.cli import main
from vsearcher_lite.relocate import check_not_moved, infer_old_root, moved_from, path_rewriter, relocate
from vsearcher_lite.runio import InputError


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """A small run with tasks, a teacher evaluation (image-search answers in the cache) and a manifest."""
    from vsearcher_lite.synthesis.filters import run_filter
    from vsearcher_lite.synthesis.inject import InjectConfig
    from vsearcher_lite.world.store import ensure_world

    run = tmp_path_factory.mktemp("written_here") / "run"
    ensure_world(run, 300, 0, workers=1)
    run_filter(run, inject_config=InjectConfig(n_train=6, n_heldout=4, n_exam=2, progress=False))
    assert main(["eval", "--run-dir", str(run), "--policy", "teacher", "--name", "t", "--limit", "3"]) == 0
    return run


def moved_copy(original, tmp_path):
    """The run copied elsewhere with the original gone (as on another machine): the old folder
    is renamed aside for the test and put back afterwards."""
    new = tmp_path / "elsewhere" / "run"
    shutil.copytree(original, new, symlinks=True)
    return new


@pytest.fixture
def moved(original, tmp_path):
    new = moved_copy(original, tmp_path)
    aside = original.with_name("run.aside")
    original.rename(aside)
    yield new
    aside.rename(original)


def image_search_rows(run):
    with sqlite3.connect(run / "cache" / "tools.sqlite") as conn:
        return conn.execute("SELECT key, request, response FROM calls WHERE response LIKE '%\"images\": [{%'").fetchall()


def fingerprint(run):
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run.rglob("*")) if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


def test_the_manifest_records_the_folder_a_run_was_written_in(original):
    manifest = json.loads((original / "run_manifest.json").read_text())
    assert manifest["run_dir"] == str(original.resolve())
    assert moved_from(original) is None
    check_not_moved(original)  # not moved: no error
    assert image_search_rows(original), "the fixture's evaluation should have cached image-search answers"


def test_a_moved_run_is_refused_with_the_command_that_fixes_it(moved, original, capsys):
    assert moved_from(moved) == original.resolve()
    code = main(["eval", "--run-dir", str(moved), "--policy", "teacher", "--name", "again", "--limit", "2"])
    err = capsys.readouterr().err
    assert code == 2 and f"vsearcher-lite relocate --run-dir {moved}" in err and str(original.resolve()) in err
    assert not (moved / "eval" / "again").exists()
    from vsearcher_lite.synthesis.sources import open_sandbox
    from vsearcher_lite.tools.factory import make_toolbox

    for opener in (open_sandbox, make_toolbox):
        with pytest.raises(InputError, match="relocate --run-dir"):
            opener(moved)


def test_a_copy_beside_its_original_is_refused_too(original, tmp_path):
    # The copy would read the original's images while they exist: the quiet case.
    copy = moved_copy(original, tmp_path)
    with pytest.raises(InputError, match=f"written in {original.resolve()}"):
        check_not_moved(copy)


def test_dry_run_changes_nothing(moved, original, capsys):
    before = fingerprint(moved)
    assert main(["relocate", "--run-dir", str(moved), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{original.resolve()} -> {moved.resolve()}: would rewrite" in out and "filter/heldout.jsonl" in out
    assert fingerprint(moved) == before
    assert moved_from(moved) == original.resolve()


def test_relocate_rewrites_every_path_and_the_run_works_again(moved, original, capsys):
    old = str(original.resolve())
    rows_before = image_search_rows(moved)
    report = relocate(moved)
    assert report.old_root == original.resolve() and report.new_root == moved.resolve()
    assert report.files["filter/heldout.jsonl"] > 0 and report.files["eval/t/results.jsonl"] > 0
    assert report.cache_rows["cache/tools.sqlite"] == len(rows_before)
    for path in moved.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".csv"):
            assert old not in path.read_text(), path
    rows_after = image_search_rows(moved)
    assert len(rows_after) == len(rows_before)
    assert all(old not in response and str(moved.resolve()) in response for _, _, response in rows_after)
    assert {key for key, _, _ in rows_after} == {key for key, _, _ in rows_before}  # requests name no paths
    for line in (moved / "filter" / "heldout.jsonl").read_text().splitlines():
        image = json.loads(line)["image_path"]
        assert image.startswith(str(moved.resolve())) and Path(image).is_file()
    assert moved_from(moved) is None

    # The run works where it is now: the same teacher evaluation, answered from the rewritten cache.
    assert main(["eval", "--run-dir", str(moved), "--policy", "teacher", "--name", "again", "--limit", "3"]) == 0
    first = [json.loads(x) for x in (moved / "eval" / "t" / "results.jsonl").read_text().splitlines()]
    again = [json.loads(x) for x in (moved / "eval" / "again" / "results.jsonl").read_text().splitlines()]
    assert sorted((r["id"], r["prediction"], r["correct"]) for r in again) == sorted(
        (r["id"], r["prediction"], r["correct"]) for r in first)  # episodes finish in any order
    assert len(image_search_rows(moved)) == len(rows_before)  # no new image search: the cache answered
    capsys.readouterr()
    assert main(["relocate", "--run-dir", str(moved)]) == 0
    assert "nothing to relocate" in capsys.readouterr().out


def test_a_run_without_a_recorded_folder_is_found_from_its_paths(moved, original):
    manifest = json.loads((moved / "run_manifest.json").read_text())
    del manifest["run_dir"]  # as written before the manifest recorded it
    (moved / "run_manifest.json").write_text(json.dumps(manifest))
    assert moved_from(moved) is None
    assert infer_old_root(moved) == original.resolve()
    report = relocate(moved)
    assert report.old_root == original.resolve() and report.files
    assert json.loads((moved / "run_manifest.json").read_text())["run_dir"] == str(moved.resolve())


def test_bad_input_is_named(tmp_path, original):
    with pytest.raises(InputError, match="no such run folder"):
        relocate(tmp_path / "missing")
    with pytest.raises(InputError, match="absolute path"):
        relocate(original, "runs/old")
    empty = tmp_path / "empty"
    empty.mkdir()
    report = relocate(empty)  # nothing names another folder: nothing to do, no error
    assert report.replacements == 0 and report.old_root == empty.resolve()


def test_the_rewriter_matches_whole_folder_names_and_json_escapes():
    rewrite = path_rewriter("/data/élan/run", "/home/u/run")
    raw = json.dumps({"a": "/data/élan/run/x.jpg"}, ensure_ascii=False)
    escaped = json.dumps({"a": "/data/élan/run/x.jpg", "b": "/data/élan/run-2/y.jpg"})
    assert rewrite(raw) == ('{"a": "/home/u/run/x.jpg"}', 1)
    text, n = rewrite(escaped)
    assert n == 1 and json.loads(text) == {"a": "/home/u/run/x.jpg", "b": "/data/élan/run-2/y.jpg"}
    assert rewrite("/data/élan/run.bak/z,/data/élan/run\n") == ("/data/élan/run.bak/z,/home/u/run\n", 1)


def test_the_world_names_its_images_absolutely_from_any_working_folder(original, monkeypatch):
    from vsearcher_lite.world.store import open_world

    monkeypatch.chdir(original.parent)
    world = open_world("run")  # relative, as a notebook's "../runs/x" or the CLI's "runs/x"
    image_id = world.connect().execute("SELECT id FROM images LIMIT 1").fetchone()[0]
    path = world.image_path(image_id)
    assert path.is_absolute() and path.is_file() and str(path).startswith(str(original.resolve()))


def test_cached_answers_naming_images_relative_to_a_working_folder_are_dropped(moved):
    with sqlite3.connect(moved / "cache" / "tools.sqlite") as conn:
        namespace = conn.execute("SELECT namespace FROM calls WHERE namespace LIKE 'tools.sandbox%' LIMIT 1").fetchone()[0]
        response = json.dumps({"tool": "image_search", "text": "...", "images": [{"location": "runs/a/world/images/I1.png"}]})
        conn.execute("INSERT INTO calls (key, namespace, request, response, created) VALUES ('k-rel', ?, '{}', ?, 0)",
                     (namespace, response))
        n_before = conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    dry = relocate(moved, dry_run=True)
    assert dry.cache_dropped == {"cache/tools.sqlite": 1} and "would drop 1" in dry.summary()
    report = relocate(moved)
    assert report.cache_dropped == {"cache/tools.sqlite": 1}
    with sqlite3.connect(moved / "cache" / "tools.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == n_before - 1
        assert conn.execute("SELECT 1 FROM calls WHERE key = 'k-rel'").fetchone() is None


def test_a_run_without_a_recorded_folder_is_refused_only_when_its_images_are_gone(original, tmp_path):
    copy = moved_copy(original, tmp_path)
    manifest = json.loads((copy / "run_manifest.json").read_text())
    del manifest["run_dir"]
    (copy / "run_manifest.json").write_text(json.dumps(manifest))
    check_not_moved(copy)  # the original still exists: sharing its files or a copy, nothing says which
    aside = original.with_name("run.aside")
    original.rename(aside)
    try:
        with pytest.raises(InputError, match=f"relocate --run-dir {copy.resolve()}"):
            check_not_moved(copy)
    finally:
        aside.rename(original)


def test_commands_that_read_no_run_are_not_stopped_by_a_moved_default_run(tmp_path, monkeypatch, capsys):
    default = tmp_path / "runs" / "default"
    default.mkdir(parents=True)
    (default / "run_manifest.json").write_text(json.dumps({"run_dir": "/somewhere/else/default"}))
    monkeypatch.chdir(tmp_path)
    assert main(["tools", "text-search", "bridge"]) == 2
    assert "relocate --run-dir" in capsys.readouterr().err
    assert main(["format-check", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "missing.jsonl" in err and "relocate" not in err


def test_a_second_pass_and_an_old_folder_inside_the_new_path_change_nothing_more(tmp_path):
    old, new = "/workspace/runs/a", str(tmp_path / "workspace" / "runs" / "a")
    rewrite = path_rewriter(old, new)
    once, n = rewrite(json.dumps({"p": f"{old}/x.jpg"}))
    assert n == 1 and rewrite(once) == (once, 0)


def test_linked_files_are_left_to_the_run_they_belong_to(moved, original, tmp_path):
    outside = tmp_path / "other.jsonl"
    outside.write_text(json.dumps({"image_path": f"{original.resolve()}/inject-image/images/x.jpg"}) + "\n")
    (moved / "linked.jsonl").symlink_to(outside)
    report = relocate(moved)
    assert "linked.jsonl" not in report.files and str(original.resolve()) in outside.read_text()
