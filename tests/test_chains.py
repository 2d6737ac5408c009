"""Training chains at scale: renamed training worlds, the pooled file, its counts and its checks."""

from __future__ import annotations

import json

import pytest

from vsearcher_lite.runio import InputError, read_json, read_jsonl
from vsearcher_lite.synthesis import chains
from vsearcher_lite.synthesis.chains import ChainConfig, parse_level_tasks, pool_records, run_chains
from vsearcher_lite.world.rename import evaluation_roots, name_roots

# a few tasks of every level but four rounds: a world of this size finishes in seconds
SMALL_LEVELS = {"onehop": 6, "easy": 6, "rounds2": 6, "medium": 6, "rounds4": 0, "hard": 6}


def small_config(**overrides) -> ChainConfig:
    settings = {"trajectories": 10_000, "entities": 150, "max_worlds": 2,
                "level_tasks": dict(SMALL_LEVELS), **overrides}
    return ChainConfig(**settings)


@pytest.fixture(scope="module")
def chain_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("chains")
    return out, run_chains(out, small_config(), log=lambda line: None)


def test_a_training_world_shares_no_name_root_with_the_evaluation_world(chain_run):
    from vsearcher_lite.world.store import open_world

    out, metrics = chain_run
    for world in metrics["worlds"]:
        opened = open_world(out / "worlds" / f"seed-{world['seed']}")
        names = [row[0] for row in opened.connect().execute("SELECT name FROM entities")]
        assert names, "the world has entities"
        assert not name_roots(names) & evaluation_roots()
        assert opened.fingerprint.endswith("-renamed")
        assert opened.manifest["renamed_away"] is True
    assert sum(w["renamed_roots"] for w in metrics["worlds"]) > 0, "some roots clashed and moved"


def test_the_pooled_file_counts_what_it_holds(chain_run):
    out, metrics = chain_run
    records = list(read_jsonl(out / "trajectories" / "export" / "sft_trl.jsonl"))
    assert len(records) == metrics["n_records"] > 0
    texts = [json.dumps(r["messages"], sort_keys=True) for r in records]
    assert metrics["distinct_trajectories"] == len(set(texts))
    assert max(texts.count(t) for t in set(texts)) <= 2
    levels = {r["level"] for r in records}
    assert levels <= set(chains.CHAIN_ROUNDS) and "rounds4" not in levels
    assert sum(metrics["records_by_level"].values()) == len(records)
    assert metrics["distinct_tasks"] == len({(r["world_seed"], r["task_id"]) for r in records})
    assert {r["world_seed"] for r in records} == {1001, 1002}
    for r in records:  # images resolve from the output folder, where `sft --train-file` looks
        for image in r["images"]:
            assert (out / image).is_file(), image
    assert not metrics["reached_target"] and metrics["n_worlds"] == 2


def test_a_finished_world_is_read_back_and_other_settings_are_refused(chain_run, tmp_path):
    out, metrics = chain_run
    again = run_chains(out, small_config(), log=lambda line: None)
    assert all(w["reused"] for w in again["worlds"])
    assert again["distinct_trajectories"] == metrics["distinct_trajectories"]
    with pytest.raises(InputError, match="metrics.json: built with other settings"):
        run_chains(out, small_config(entities=200), log=lambda line: None)


def test_repeats_past_the_limit_and_evaluation_world_names_are_dropped():
    def record(text: str) -> dict:
        return {"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
                "level": "easy", "world_seed": 1001, "task_id": text}

    records = [record("a"), record("a"), record("a"), record("b"), record("forbidden")]
    kept, drops = pool_records(records, ChainConfig(max_repeats=2),
                               lambda r: ["X"] if "forbidden" in json.dumps(r) else [])
    assert sorted(r["task_id"] for r in kept) == ["a", "a", "b"]
    assert drops == {"n_dropped_repeats": 1, "n_dropped_naming_evaluation_world": 1}


def test_the_naming_check_finds_an_evaluation_world_name():
    from vsearcher_lite.world.rename import default_world_names

    names_in = chains.naming_check()
    name = next(n for n in default_world_names() if " " in n)
    mentions = {"messages": [{"role": "tool", "content": f"The page says {name} is near."}]}
    clean = {"messages": [{"role": "tool", "content": "The page says nothing of note."}]}
    assert name in names_in(mentions) and names_in(clean) == []


def test_level_tasks_and_settings_are_checked():
    assert parse_level_tasks("hard:900, onehop:0")["hard"] == 900
    with pytest.raises(InputError, match="'hardest:3' is not LEVEL:N"):
        parse_level_tasks("hardest:3")
    with pytest.raises(InputError, match="every level asks for 0 tasks"):
        ChainConfig(level_tasks={k: 0 for k in chains.CHAIN_ROUNDS}).check()
    with pytest.raises(InputError, match="entities must be a whole number"):
        ChainConfig(entities=0).check()


def test_the_command_names_a_bad_level_in_one_line(capsys):
    from vsearcher_lite.cli import main

    with pytest.raises(SystemExit):
        main(["chains", "--out", "unused", "--level-tasks", "hard:x"])
    err = capsys.readouterr().err
    assert "--level-tasks" in err and "'hard:x' is not LEVEL:N" in err
    assert "Traceback" not in err


def test_the_metrics_keep_the_settings(chain_run):
    out, metrics = chain_run
    stored = read_json(out / "metrics.json")
    assert stored["settings"]["level_tasks"] == SMALL_LEVELS
    assert stored["distinct_trajectories_by_level"] == metrics["distinct_trajectories_by_level"]
