"""The run manifest: per-stage config, versions, commit, seeds and wall time; merge-safe; no
secrets."""

import json
import multiprocessing
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from vsearcher_lite import manifest as mf
from vsearcher_lite.live.secrets import get_secret
from vsearcher_lite.runio import InputError


@dataclass
class FakeConfig:
    seed: int = 7
    lr: float = 1e-5
    out: Path = Path("runs/x")


def test_a_stage_entry_records_everything_asked(tmp_path):
    entry = mf.write_manifest(
        tmp_path, "sft", {"trainer": FakeConfig(), "sampling_seed": 11, "sizes": (1, 2)}, 12.3456
    )
    data = json.loads((tmp_path / mf.MANIFEST_FILE).read_text())
    stage = data["stages"]["sft"]
    assert stage == entry
    assert stage["config"] == {
        "trainer": {"seed": 7, "lr": 1e-5, "out": "runs/x"},
        "sampling_seed": 11,
        "sizes": [1, 2],
    }
    assert stage["seeds"] == {"trainer.seed": 7, "sampling_seed": 11}
    assert stage["seconds"] == 12.346 and stage["runs"] == 1
    packages = stage["packages"]
    assert packages["torch"] and packages["transformers"] and packages["trl"] and packages["peft"]
    assert packages["python"].count(".") == 2
    assert set(stage["git"]) == {"commit", "dirty"}
    assert (
        data["manifest_version"] == mf.MANIFEST_VERSION and data["created_at"] <= data["updated_at"]
    )


def test_git_commit_matches_the_checkout_and_outside_git_is_none(tmp_path):
    expected = subprocess.run(
        ["git", "-C", str(mf.source_root()), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    state = mf.git_state()
    if expected.returncode == 0:
        assert state["commit"] == expected.stdout.strip() and isinstance(state["dirty"], bool)
    else:  # the package runs from a copy that is not a checkout (a tarball, a wheel)
        assert state == {"commit": None, "dirty": None}
    assert mf.git_state(tmp_path) == {"commit": None, "dirty": None}  # tmp_path is not a checkout


def test_git_missing_binary_does_not_crash(monkeypatch):
    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(mf.subprocess, "run", no_git)
    assert mf.git_state() == {"commit": None, "dirty": None}


def test_secrets_never_reach_the_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("VSL_MANIFEST_TEST_KEY", "sk-manifest-test-0123456789")
    key = get_secret("VSL_MANIFEST_TEST_KEY")
    config = {
        "teacher": {"api_key": "plain-secret-value", "base_url": f"https://api.test/v1?key={key}"},
        "note": f"called with {key}",
        "headers": {"Authorization": "Bearer abcdefghijklmnop"},
    }
    mf.write_manifest(tmp_path, "trajectories", config, 1.0)
    text = (tmp_path / mf.MANIFEST_FILE).read_text()
    for secret in (key, "plain-secret-value", "abcdefghijklmnop"):
        assert secret not in text
    stage = json.loads(text)["stages"]["trajectories"]["config"]
    assert stage["teacher"]["api_key"] == "***" and stage["teacher"]["base_url"].endswith("key=***")


def test_stages_merge_and_a_rerun_replaces_its_entry(tmp_path):
    mf.write_manifest(tmp_path, "world", {"seed": 0, "n_entities": 2000}, 2.0)
    mf.write_manifest(tmp_path, "seeds", {"seed": 0}, 0.5)
    mf.write_manifest(tmp_path, "world", {"seed": 1, "n_entities": 400}, 1.0)
    stages = mf.read_manifest(tmp_path)["stages"]
    assert set(stages) == {"world", "seeds"}
    assert stages["world"]["config"]["seed"] == 1 and stages["world"]["runs"] == 2
    assert stages["seeds"]["runs"] == 1


def _write_many(args):
    run_dir, worker = args
    for i in range(5):
        mf.write_manifest(run_dir, f"stage-{worker}-{i}", {"seed": worker * 10 + i}, 0.1)
    return worker


def test_concurrent_writers_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        done = pool.map(_write_many, [(str(tmp_path), w) for w in range(4)])
    assert sorted(done) == [0, 1, 2, 3]
    stages = mf.read_manifest(tmp_path)["stages"]
    assert len(stages) == 20
    assert stages["stage-3-4"]["seeds"] == {"seed": 34}
    assert not list(tmp_path.glob(".run_manifest.json.*.tmp"))  # no temporary file left behind


def test_a_broken_manifest_is_reported_not_overwritten(tmp_path):
    (tmp_path / mf.MANIFEST_FILE).write_text("{not json")
    with pytest.raises(InputError, match="run_manifest.json: not valid JSON"):
        mf.write_manifest(tmp_path, "eval", {}, 1.0)
    assert (tmp_path / mf.MANIFEST_FILE).read_text() == "{not json"


def test_recorded_stage_times_the_block_and_skips_failures(tmp_path):
    with mf.recorded_stage(tmp_path, "filter", {"seed": 5}):
        pass
    with pytest.raises(RuntimeError):
        with mf.recorded_stage(tmp_path, "grpo", {"seed": 5}):
            raise RuntimeError("boom")
    stages = mf.read_manifest(tmp_path)["stages"]
    assert "filter" in stages and "grpo" not in stages
    assert 0 <= stages["filter"]["seconds"] < 5


def test_empty_stage_name_is_refused(tmp_path):
    with pytest.raises(ValueError):
        mf.write_manifest(tmp_path, " ", {}, 0.0)
