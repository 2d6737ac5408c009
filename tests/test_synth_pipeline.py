"""The synthesis stages end to end through the CLI, resumability, and the exam's guarantees."""

import html
import json
from pathlib import Path

import pytest
from test_synth_support import copy_run, small_sandbox

from vsearcher_lite.cli import main
from vsearcher_lite.runio import InputError, read_jsonl
from vsearcher_lite.synthesis.inject import InjectConfig, index_for, run_inject_text
from vsearcher_lite.synthesis.seeds import read_seeds
from vsearcher_lite.synthesis.text import mentions_answer
from vsearcher_lite.synthesis.writer import RuleWriter

SIZES = ["--n-train", "24", "--n-heldout", "6", "--n-exam", "6"]


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    run = copy_run(small_sandbox(tmp_path_factory), tmp_path_factory.mktemp("pipeline") / "run")
    assert main(["filter", "--run-dir", str(run), *SIZES]) == 0
    return run


def metrics(run, stage):
    return json.loads((run / stage / "metrics.json").read_text())


def test_every_stage_writes_its_metrics(pipeline_run):
    seeds, text, image, filt = (
        metrics(pipeline_run, s) for s in ("seeds", "inject-text", "inject-image", "filter")
    )
    assert seeds["n_seeds"] > 0
    assert text["answer_invariance_rate"] == 1.0 and text["n_invariance_checked"] == text["n_tasks"]
    assert image["answer_invariance_rate"] == 1.0
    assert text["n_tasks_by_difficulty"]["easy"] > 0 and text["n_tasks_by_difficulty"]["exam"] > 0
    assert not any(r.startswith("internal_error") for r in text["failed_reasons"])
    assert not any(r.startswith("internal_error") for r in image["failed_reasons"])
    words = text["mean_question_words"]
    assert words["easy"] < words["medium"] < words["hard"] < words["exam"]
    by_round = text["mean_question_words_by_round"]
    assert [by_round[str(i)] for i in range(6)] == sorted(by_round[str(i)] for i in range(6))
    assert filt["n_input"] == image["n_tasks"]
    assert filt["n_kept"] == sum(filt["n_kept_by_split"].values()) > 0
    assert sum(filt["removed"].values()) + filt["unverified"] + filt["n_kept"] == filt["n_input"]


def test_kept_files_follow_the_labels(pipeline_run):
    out = pipeline_run / "filter"
    labeled = list(read_jsonl(out / "labeled.jsonl"))
    kept_ids = {t["id"] for t in labeled if all(v is False for v in t["filters"].values())}
    written = {}
    for name, split in (
        ("train", "train"),
        ("rl_tasks", "train"),
        ("validation", "train"),
        ("heldout", "heldout"),
        ("exam", "exam"),
    ):
        for t in read_jsonl(out / f"{name}.jsonl"):
            # the RL pool and the validation tasks are carved out of the training split
            assert t["split"] == split and t["id"] not in written
            written[t["id"]] = t
    assert set(written) == kept_ids
    easy = [t["id"] for t in read_jsonl(out / "train_easy.jsonl")]
    assert all(written[i]["difficulty"] == "easy" for i in easy)
    for t in written.values():
        assert not mentions_answer(t["question"], t["answer"], t["aliases"])
        path = t["image_path"]  # named relative to the run folder
        assert not Path(path).is_absolute() and (pipeline_run / path).is_file()
    funnel = (out / "funnel.csv").read_text().splitlines()
    # onehop, easy, medium, hard, exam
    assert funnel[0] == "difficulty,stage,remaining" and len(funnel) == 1 + 5 * 6


def test_the_rl_pool_shares_no_seed_with_sft_heldout_or_exam(pipeline_run):
    out = pipeline_run / "filter"
    files = {
        name: list(read_jsonl(out / f"{name}.jsonl"))
        for name in ("train", "rl_tasks", "validation", "heldout", "exam")
    }
    seeds = {name: {t["seed_id"] for t in tasks} for name, tasks in files.items()}
    pool = files["rl_tasks"]
    assert pool and not seeds["rl_tasks"] & (seeds["train"] | seeds["heldout"] | seeds["exam"])
    # validation: whole seeds that neither SFT, the RL pool nor the evaluation files use
    others = seeds["train"] | seeds["rl_tasks"] | seeds["heldout"] | seeds["exam"]
    assert files["validation"] and not seeds["validation"] & others
    # the level files are SFT's tasks only
    for level in ("onehop", "easy", "medium", "hard"):
        level_ids = {t["id"] for t in read_jsonl(out / f"train_{level}.jsonl")}
        assert level_ids == {t["id"] for t in files["train"] if t["difficulty"] == level}
    # size: at most a third of the training seeds (the default cap), and the metrics say what the
    # file holds
    training_seeds = seeds["rl_tasks"] | seeds["train"] | seeds["validation"]
    assert len(seeds["rl_tasks"]) <= len(training_seeds) / 3
    m = metrics(pipeline_run, "filter")
    by_level = {}
    for t in pool:
        by_level[t["difficulty"]] = by_level.get(t["difficulty"], 0) + 1
    assert m["rl_pool"]["n_tasks"] == len(pool) == m["n_kept_by_split"]["rl"]
    assert m["rl_pool"]["n_by_difficulty"] == by_level and m["rl_pool"]["n_seeds"] == len(
        seeds["rl_tasks"]
    )
    assert m["rl_pool"]["seed_overlap"] == {"train": 0, "heldout": 0, "exam": 0}
    assert m["n_kept_by_split"]["train"] == len(files["train"])
    assert m["n_kept_by_split"]["validation"] == len(files["validation"]) == sum(
        m["validation"].values())


def test_the_rl_pool_options(pipeline_run, tmp_path, capsys):
    import shutil

    # the labels are reused: no filter runs again
    run = Path(shutil.copytree(pipeline_run, tmp_path / "run"))
    kept_train = {
        t["id"]
        for name in ("train", "rl_tasks", "validation")
        for t in read_jsonl(pipeline_run / "filter" / f"{name}.jsonl")
    }
    no_split = ["--rl-tasks", "0", "--validation-tasks", "0"]
    assert main(["filter", "--run-dir", str(run), *SIZES, *no_split]) == 0
    assert list(read_jsonl(run / "filter" / "validation.jsonl")) == []
    assert list(read_jsonl(run / "filter" / "rl_tasks.jsonl")) == []
    assert {
        t["id"] for t in read_jsonl(run / "filter" / "train.jsonl")
    } == kept_train  # no pool and no validation: train as before
    assert main(["filter", "--run-dir", str(run), *SIZES, "--rl-tasks", "3"]) == 0
    pool = list(read_jsonl(run / "filter" / "rl_tasks.jsonl"))
    # whole seeds are taken until the pool holds at least 3 tasks: the last seed may bring more than
    # one
    assert (
        len(pool) >= 3
        and len(pool)
        - max(sum(1 for t in pool if t["seed_id"] == s) for s in {t["seed_id"] for t in pool})
        < 3
    )
    before = (run / "filter" / "train.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["filter", "--run-dir", str(run), *SIZES, "--rl-max-share", "1.5"]) == 2
    err = capsys.readouterr().err
    assert "--rl-max-share" in err and "Traceback" not in err
    assert main(["filter", "--run-dir", str(run), *SIZES, "--validation-tasks", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--validation-tasks" in err and "Traceback" not in err
    assert (
        run / "filter" / "train.jsonl"
    ).read_bytes() == before  # a refused option changes nothing


def test_exam_is_ten_rounds_on_seeds_never_used_for_training(pipeline_run):
    pools = {r["id"]: r["pool"] for r in read_seeds(pipeline_run)}
    tasks = list(read_jsonl(pipeline_run / "inject-image" / "tasks.jsonl"))
    training_seeds = {t["seed_id"] for t in tasks if t["split"] != "exam"}
    exam = [t for t in tasks if t["split"] == "exam"]
    assert exam
    for t in exam:
        assert len(t["rounds"]) == 10 and t["difficulty"] == "exam"
        assert pools[t["seed_id"]] == "exam" and t["seed_id"] not in training_seeds
        assert {"question", "image_path", "answer"} <= set(t)
    assert metrics(pipeline_run, "filter")["exam_seed_overlap_with_training"] == 0
    for t in read_jsonl(pipeline_run / "filter" / "exam.jsonl"):
        assert t["seed_id"] not in training_seeds


def test_a_rerun_does_nothing_new(pipeline_run):
    before = (pipeline_run / "inject-text" / "tasks.jsonl").read_bytes()
    assert main(["inject-text", "--run-dir", str(pipeline_run), *SIZES]) == 0
    assert (pipeline_run / "inject-text" / "tasks.jsonl").read_bytes() == before
    assert metrics(pipeline_run, "inject-text")["built_this_run"] == 0


class CrashingWriter(RuleWriter):
    """A rule writer that dies (like a Ctrl-C) at its n-th initial question."""

    def __init__(self, *a, crash_at, **kw):
        super().__init__(*a, **kw)
        self.calls, self.crash_at = 0, crash_at

    def initial_qa(self, seed, page, ctx):
        self.calls += 1
        if self.calls == self.crash_at:
            raise KeyboardInterrupt
        return super().initial_qa(seed, page, ctx)


def test_interrupted_stage_resumes_without_duplicates(tmp_path_factory, tmp_path):
    from vsearcher_lite.world import open_world

    world_run = small_sandbox(tmp_path_factory)
    config = InjectConfig(n_train=20, n_heldout=4, n_exam=4, progress=False)
    ref = copy_run(world_run, tmp_path / "ref")
    run_inject_text(ref, config)
    reference = {t["id"]: t for t in read_jsonl(ref / "inject-text" / "tasks.jsonl")}

    run = copy_run(world_run, tmp_path / "run")
    source = open_world(run).knowledge
    crasher = CrashingWriter(source, index_for(source), crash_at=9)
    with pytest.raises(KeyboardInterrupt):
        run_inject_text(run, config, source=source, writer=crasher)
    log = run / "inject-text" / "tasks.jsonl"
    done = [t["id"] for t in read_jsonl(log)]
    assert 0 < len(done) < len(reference)
    with log.open("a") as fh:  # a torn last line, as a crash mid-write would leave
        fh.write('{"id": "train-easy-E9999", "question": "Wh')
    metrics_after = run_inject_text(run, config)
    ids = [t["id"] for t in read_jsonl(log)]
    assert len(ids) == len(set(ids))  # no duplicates
    assert set(ids) == set(reference)  # and the same tasks as an uninterrupted run
    for t in read_jsonl(log):
        assert t == reference[t["id"]]
    assert metrics_after["n_tasks"] == len(reference)


def test_user_errors_are_one_line(tmp_path, capsys):
    assert main(["inject-text", "--run-dir", str(tmp_path / "r"), "--mix", "1:2"]) == 2
    err = capsys.readouterr().err
    assert "--mix" in err and "Traceback" not in err
    bad = tmp_path / "bad"
    (bad / "inject-image").mkdir(parents=True)
    (bad / "inject-image" / "metrics.json").write_text("{}")
    (bad / "inject-image" / "tasks.jsonl").write_text('{"id": "x", "question": "q?"}\n')
    from vsearcher_lite.runio import InputError
    from vsearcher_lite.synthesis.inject import ensure_image_tasks

    with pytest.raises(InputError, match=r"tasks.jsonl:1: not a task record"):
        ensure_image_tasks(bad)


def test_figures_and_viewers_redraw_from_saved_files(pipeline_run):
    from vsearcher_lite.synthesis import plots

    seeds = metrics(pipeline_run, "seeds")
    population = plots.read_csv_rows(pipeline_run / "seeds" / "population.csv")
    scatter = plots.seed_scatter(population, seeds["sitelinks_max"], seeds["statements_min"])
    assert sum(len(t.x) for t in scatter.data) == len(population)
    assert len(scatter.data[0].x) == seeds["n_seeds"]  # the first trace is the selected seeds

    lengths = plots.question_length_figure(metrics(pipeline_run, "inject-text"))
    assert list(lengths.data[0].x) == sorted(lengths.data[0].x) and len(lengths.data[1].x) == 5

    task = next(
        t
        for t in read_jsonl(pipeline_run / "inject-image" / "tasks.jsonl")
        if t["difficulty"] == "hard"
    )
    viewer = plots.rounds_viewer(task)
    assert len(viewer) == 1 + 5 + 1  # initial QA, five rounds, the image
    assert (
        "Round 2" in viewer.steps[2] and html.escape(task["rounds"][1]["entity"]) in viewer.steps[2]
    )
    assert "Image injection" in viewer.steps[-1] and task["id"] in viewer._repr_html_()

    cards = plots.task_cards_html([task], run_dir=pipeline_run)
    assert cards.count("data:image/jpeg;base64,") == 2 and task["id"] in cards

    funnel = plots.funnel_figure(plots.read_csv_rows(pipeline_run / "filter" / "funnel.csv"))
    filt = metrics(pipeline_run, "filter")
    kept = {trace.name: trace.x[-1] for trace in funnel.data}
    assert kept == {
        lvl: n
        for lvl, n in filt["n_kept_by_difficulty"].items()
        if filt["by_difficulty"][lvl]["n_input"]
    }


def test_bench_has_a_synthesis_section(tmp_path):
    from vsearcher_lite.sandbox_bench import BENCH_SECTIONS, run_bench

    assert "synthesis" in BENCH_SECTIONS
    result = run_bench(tmp_path, n_entities=400, n_queries=20, sections=["synthesis"])
    assert result["synthesis_answer_invariance_rate"] == 1.0
    assert result["synthesis_image_tasks"] > 0 and result["synthesis_tasks_per_s"] > 0
    assert (tmp_path / "bench" / "synthesis" / "filter" / "metrics.json").exists()


def test_onehop_draws_on_warmup_entities_split_by_entity(pipeline_run):
    from vsearcher_lite.synthesis.inject import warmup_pools
    from vsearcher_lite.synthesis.sources import open_source

    seeds = read_seeds(pipeline_run)
    pools = {r["id"]: r["pool"] for r in seeds}
    source = open_source(pipeline_run, "sandbox")
    warmup = warmup_pools(source, seeds, seed=0, heldout_share=0.5)
    assert warmup == warmup_pools(source, seeds, seed=0, heldout_share=0.5)  # deterministic
    extra = warmup["train"] + warmup["heldout"]
    # never a seed, so never an exam seed
    assert extra and not {r["id"] for r in extra} & set(pools)
    assert len(warmup["heldout"]) == round(len(extra) * 0.5)
    assert not {r["id"] for r in warmup["train"]} & {r["id"] for r in warmup["heldout"]}

    onehop = [
        t
        for t in read_jsonl(pipeline_run / "inject-text" / "tasks.jsonl")
        if t["difficulty"] == "onehop"
    ]
    by_split = {s: {t["seed_id"] for t in onehop if t["split"] == s} for s in ("train", "heldout")}
    assert by_split["train"] and by_split["heldout"] and not by_split["train"] & by_split["heldout"]
    warm = {s: {r["id"] for r in warmup[s]} for s in ("train", "heldout")}
    for split in ("train", "heldout"):
        # the warm-up entities are used, each in its own split
        assert by_split[split] & warm[split], split
        assert not by_split[split] & warm["heldout" if split == "train" else "train"]
        assert all(pools.get(s, f"warmup-{split}") != "exam" for s in by_split[split])


def test_onehop_seeds_only_option(tmp_path_factory, tmp_path):
    from vsearcher_lite.cli import build_parser
    from vsearcher_lite.synthesis.commands import inject_config

    assert (
        InjectConfig.for_profile("cpu").onehop_warmup
        and not InjectConfig.for_profile("single_gpu").onehop_warmup
    )
    args = build_parser().parse_args(
        ["inject-text", "--run-dir", str(tmp_path), "--onehop-seeds-only"]
    )
    assert inject_config(args).onehop_warmup is False
    run = copy_run(small_sandbox(tmp_path_factory), tmp_path / "run")
    assert (
        main(
            [
                "inject-text",
                "--run-dir",
                str(run),
                "--n-train",
                "0",
                "--n-heldout",
                "0",
                "--n-exam",
                "0",
                "--onehop-seeds-only",
            ]
        )
        == 0
    )
    seeds = {r["id"] for r in read_seeds(run)}
    onehop = [
        t for t in read_jsonl(run / "inject-text" / "tasks.jsonl") if t["difficulty"] == "onehop"
    ]
    assert onehop and all(t["seed_id"] in seeds for t in onehop)


def test_easy_and_medium_draw_on_warmup_entities_in_their_own_split(tmp_path_factory, tmp_path):
    """The cpu profile builds more easy and medium tasks than there are seeds: from the warm-up
    entities, each split from its own half, so a held-out task's seed never seeds a training
    task."""
    from vsearcher_lite.cli import build_parser
    from vsearcher_lite.synthesis.commands import inject_config
    from vsearcher_lite.synthesis.inject import parse_warmup_levels, warmup_pools
    from vsearcher_lite.synthesis.sources import open_source

    assert InjectConfig.for_profile("cpu").warmup_levels == {
        "easy": (480, 320),
        "medium": (450, 340),
        "hard": (450, 345),
    }
    assert InjectConfig.for_profile("single_gpu").warmup_levels == {}
    args = build_parser().parse_args(
        ["inject-text", "--run-dir", str(tmp_path), "--warmup-levels", "none"]
    )
    assert inject_config(args).warmup_levels == {}
    with pytest.raises(InputError, match="LEVEL:TRAIN:HELDOUT"):
        parse_warmup_levels("onehop:3:1")
    with pytest.raises(ValueError, match="unknown level"):
        InjectConfig(warmup_levels={"expert": (1, 1)}).targets()

    run = copy_run(small_sandbox(tmp_path_factory), tmp_path / "run")
    assert (
        main(
            [
                "inject-text",
                "--run-dir",
                str(run),
                "--n-train",
                "6",
                "--n-heldout",
                "3",
                "--n-exam",
                "0",
                "--onehop-train",
                "0",
                "--onehop-heldout",
                "0",
                "--warmup-levels",
                "easy:12:6",
            ]
        )
        == 0
    )
    seeds = read_seeds(run)
    warmup = warmup_pools(open_source(run, "sandbox"), seeds, seed=0)
    warm = {s: {r["id"] for r in warmup[s]} for s in ("train", "heldout")}
    tasks = list(read_jsonl(run / "inject-text" / "tasks.jsonl"))
    easy = {
        s: [t for t in tasks if t["difficulty"] == "easy" and t["split"] == s]
        for s in ("train", "heldout")
    }
    assert len(easy["train"]) > 6 and len(easy["heldout"]) > 3  # more than the seed pools' share
    for split, other in (("train", "heldout"), ("heldout", "train")):
        used = {t["seed_id"] for t in easy[split]}
        assert used & warm[split] and not used & warm[other]
    assert not {t["seed_id"] for t in easy["train"]} & {t["seed_id"] for t in easy["heldout"]}
    assert all(
        t["difficulty"] != "medium" or t["seed_id"] not in warm["train"] | warm["heldout"]
        for t in tasks
    )


def test_exam_also_starts_at_rare_people_whom_no_other_task_starts_at(tmp_path_factory, tmp_path):
    """The exam pool's seeds give few ten-round chains; the exam goes on with rare people, whom
    seeds and warm-up entities exclude, so its seeds stay disjoint from training and held-out
    ones."""
    from vsearcher_lite.synthesis.inject import exam_people
    from vsearcher_lite.synthesis.sources import open_source

    run = copy_run(small_sandbox(tmp_path_factory), tmp_path / "run")
    assert (
        main(
            [
                "inject-text",
                "--run-dir",
                str(run),
                "--n-train",
                "6",
                "--n-heldout",
                "3",
                "--n-exam",
                "40",
                "--onehop-train",
                "20",
                "--onehop-heldout",
                "20",
                "--warmup-levels",
                "easy:12:6",
            ]
        )
        == 0
    )
    seeds = read_seeds(run)
    pools = {r["id"]: r["pool"] for r in seeds}
    source = open_source(run, "sandbox")
    people = exam_people(source, 5, seed=0)
    assert people == exam_people(source, 5, seed=0) and people  # deterministic
    assert all(source.entity(r["id"]).is_person and r["sitelinks"] <= 5 for r in people)
    assert not {r["id"] for r in people} & set(pools)

    tasks = list(read_jsonl(run / "inject-text" / "tasks.jsonl"))
    exam = [t for t in tasks if t["split"] == "exam"]
    others = {t["seed_id"] for t in tasks if t["split"] != "exam"}
    n_exam_seeds = sum(1 for p in pools.values() if p == "exam")
    assert len(exam) > n_exam_seeds  # more exam tasks than the exam pool has seeds
    assert {t["seed_id"] for t in exam} & {r["id"] for r in people}
    for t in exam:
        assert len(t["rounds"]) == 10 and t["seed_id"] not in others
        assert pools.get(t["seed_id"], "exam") == "exam"
    assert not any(source.entity(s).is_person for s in others)

    from vsearcher_lite.cli import build_parser
    from vsearcher_lite.synthesis.commands import inject_config

    args = build_parser().parse_args(
        ["inject-text", "--run-dir", str(tmp_path), "--exam-seeds-only"]
    )
    assert inject_config(args).exam_people is False and InjectConfig.for_profile("cpu").exam_people
    off = copy_run(small_sandbox(tmp_path_factory), tmp_path / "off")
    run_inject_text(
        off, InjectConfig(n_train=0, n_heldout=0, n_exam=40, exam_people=False, progress=False)
    )
    only_seeds = [
        t for t in read_jsonl(off / "inject-text" / "tasks.jsonl") if t["split"] == "exam"
    ]
    assert len(only_seeds) <= n_exam_seeds and all(
        pools[t["seed_id"]] == "exam" for t in only_seeds
    )


def test_seed_scatter_log_axis_spans_the_points():
    import math

    from vsearcher_lite.synthesis import plots

    rows = [
        {
            "id": f"E{i}",
            "type": "river",
            "sitelinks": s,
            "statements": 5 + i % 30,
            "selected": s <= 5 and i % 30 >= 10,
            "is_person": False,
            "has_image": True,
        }
        for i, s in enumerate([0, 0, 1, 3, 5, 8, 40, 300, 900] * 10)
    ]
    fig = plots.seed_scatter(rows, 5, 15)
    xs = [x for t in fig.data for x in t.x]
    assert fig.layout.xaxis.type == "log" and min(xs) > 0
    low, high = fig.layout.xaxis.range  # log10 units
    assert low <= math.log10(min(xs)) and math.log10(max(xs)) <= high and high - low < 4
    # a shape on a log axis takes data units (the axis range takes log10 units): the corner spans
    # sitelinks + 1 from below 1 to between 5 + 1 and 8 + 1
    shape = fig.layout.shapes[0]
    assert 10 ** low <= shape.x0 < 1 and 5 + 1 < shape.x1 < 8 + 1
    selected = fig.data[0].x
    assert all(shape.x0 < x < shape.x1 for x in selected)

    small = plots.seed_scatter([dict(r, sitelinks=min(r["sitelinks"], 20)) for r in rows], 5, 15)
    assert small.layout.xaxis.type == "linear" and small.layout.shapes[0].x0 == -0.5
