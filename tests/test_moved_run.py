"""A run folder copied elsewhere works where it lands: its files name paths relative to it."""

import shutil

from agent_fakes import SMALL_WORLD_ENTITIES

from vsearcher_lite.evaluation.benchmarks import ensure_sandbox_eval_tasks
from vsearcher_lite.scoring.evaluate import EvalConfig, evaluate, load_results
from vsearcher_lite.synthesis.filters import run_filter
from vsearcher_lite.synthesis.inject import InjectConfig
from vsearcher_lite.synthesis.trajectories import (
    TrajectoryConfig,
    generate_trajectories,
    load_accepted,
)
from vsearcher_lite.training.data import load_sft_records
from vsearcher_lite.world.store import ensure_world


def files_naming(run, *folders):
    """The run's data files and caches (not its images) that name one of ``folders``."""
    found = []
    for path in run.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".csv", ".sqlite"):
            text = path.read_bytes().decode("utf-8", errors="ignore")
            found += [f"{path.relative_to(run)}: {f}" for f in folders if str(f) in text]
    return found


def test_a_copied_run_goes_on_after_the_original_is_gone(tmp_path):
    original, moved = tmp_path / "original" / "run", tmp_path / "elsewhere" / "run"
    ensure_world(original, SMALL_WORLD_ENTITIES, 0)
    sizes = InjectConfig(n_train=12, n_heldout=4, n_exam=2, progress=False)
    run_filter(original, inject_config=sizes)
    teacher = TrajectoryConfig.for_profile("cpu", progress=False, max_tasks=2, samples_per_task=2)
    generate_trajectories(original, teacher)  # fills the tool cache with image-search answers

    shutil.copytree(original, moved)
    shutil.rmtree(tmp_path / "original")

    more = TrajectoryConfig.for_profile("cpu", progress=False, max_tasks=4, samples_per_task=2)
    m = generate_trajectories(moved, more)  # resumes: the stored rollouts kept, two tasks new
    assert m["n_tasks"] == 4 and m["generated_this_run"] == 4 and m["n_trajectories"] == 8
    assert m["terminations"].get("policy_error", 0) == 0
    assert m["tool_cache"]["hits"] > 0  # answers cached in the original, read in the copy
    for traj in load_accepted(moved):
        assert traj.image_path.startswith(str(moved)) and (moved / traj.image_path).is_file()
    for record in load_sft_records(moved / "trajectories" / "export" / "sft_trl.jsonl"):
        assert all(path.startswith(str(moved)) for path in record["images"])

    tasks = ensure_sandbox_eval_tasks(moved, progress=False)  # the run's exam and held-out files
    assert tasks and all(t.image_path.startswith(str(moved)) for t in tasks)
    config = EvalConfig.for_profile("cpu", progress=False)
    metrics = evaluate(moved, tasks, "teacher", config=config)
    assert metrics["n_tasks"] == len(tasks) and metrics["terminations"].get("policy_error", 0) == 0
    assert all(r["termination"] != "policy_error" for r in load_results(moved, metrics["name"]))

    assert files_naming(moved, tmp_path / "original", moved) == []
