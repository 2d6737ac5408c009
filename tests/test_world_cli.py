"""`vsearcher-lite world` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from vsearcher_lite.cli import main


def test_world_command_builds_reuses_and_rebuilds(tmp_path, capsys):
    run = tmp_path / "run"
    assert (
        main(["world", "--run-dir", str(run), "--entities", "300", "--seed", "0", "--workers", "1"])
        == 0
    )
    out = capsys.readouterr().out
    assert "built" in out and "entities 300" in out
    metrics = json.loads((run / "world" / "metrics.json").read_text())
    for key in ("n_entities", "n_pages", "n_images", "build_seconds"):
        assert key in metrics
    assert metrics["n_entities"] == 300 and metrics["n_pages"] > 300 and metrics["n_images"] > 150
    db = run / "world" / "world.sqlite"
    stamp = db.stat().st_mtime_ns
    assert main(["world", "--run-dir", str(run), "--entities", "300", "--seed", "0"]) == 0
    assert "reusing" in capsys.readouterr().out and db.stat().st_mtime_ns == stamp
    assert (
        main(
            [
                "world",
                "--run-dir",
                str(run),
                "--entities",
                "300",
                "--seed",
                "0",
                "--force",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    assert "built" in capsys.readouterr().out
    assert json.loads((run / "world" / "manifest.json").read_text())["n_entities"] == 300
    assert sorted(p.name for p in run.iterdir()) == ["world"]


def test_world_command_bad_input_is_one_line(tmp_path, capsys):
    assert main(["world", "--run-dir", str(tmp_path / "r"), "--entities", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "at least" in err and "Traceback" not in err
    assert not (tmp_path / "r" / "world").exists()
    assert main(["world", "--run-dir", str(tmp_path / "r"), "--world", "live"]) == 2
    assert "sandbox" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["world", "--run-dir", str(tmp_path / "r"), "--entities", "zero"])
    assert info.value.code == 2
    assert "whole number" in capsys.readouterr().err
