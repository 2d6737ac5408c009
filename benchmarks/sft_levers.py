"""Levers on the SFT policy's Pass@k: fewer epochs, an early and a late model averaged, a
teacher whose samples of one task take different paths, a teacher that plans its hops, a deeper
base, and a loss weighted on what the tool responses brought in.

RL can at best turn the SFT model's Pass@k into Pass@1, so a lever is worth keeping when it
raises Pass@k without lowering Pass@1. This trains the reference's SFT for one epoch instead of
two (same trajectories, settings and seed; its learning-rate schedule spans the one epoch), averages
its weights with the two-epoch model's, and trains the reference's two-epoch SFT on trajectories
of the same tasks written with ``--plan-variety`` (in ``RUN_DIR/plans``). The teacher at its default
repeats one path per task, so most of a task's accepted samples are copies; with variety they
differ in wording, visits and checks. The hops lever trains the same SFT on trajectories written
with ``--hop-plan`` (in ``RUN_DIR/hops``): the first thought lists the question's hops and each
search asks for one hop, so the model never rewrites the whole question; the reading lever does the
same with the plan in the question's own order (``--hop-plan-order reading``, in
``RUN_DIR/reading``), so that writing the plan copies the question from left to right instead of
taking it apart from its end; the next lever adds ``--hop-plan-next`` to the reading order (in
``RUN_DIR/next``): before each search the thought writes the plan line it searches for, with the
name just found filled in, so the search copies that line; the copy lever writes that line as the
plan has it (``--hop-plan-next-form plan``, in ``RUN_DIR/copy``), so the line is copied whole from
the plan and the search fills in the name found on the line before. The deep lever trains the
reference's SFT on the reference's trajectories from a deeper base (in ``RUN_DIR/deep``): the
shipped base with each text layer followed by ``--depth-factor`` - 1 copies of itself whose output
projections start at zero, so it starts as the shipped base's function with more layers to learn
with. The fresh lever trains the same SFT with ``fresh_weight`` ``--fresh-weight`` (in
``RUN_DIR/fresh``): the first tokens of each name or URL the agent takes from a tool response
weigh that much in the loss, where the tiny model tends to copy a name it already wrote instead of
the one the response gave. The deep and fresh levers train as many epochs as the source's SFT
did. Each model is sampled ``--samples`` times at T 1.0 on the validation split's easy, medium
and hard tasks (neither held-out nor RL pool). Prints the distinct trajectories per task of each
teacher, then Pass@1 and Pass@k per model and level, and the tasks solved sometimes but not always
(what GRPO learns from). With ``--heldout`` each teacher, deep or fresh lever's SFT model is also
evaluated as the reference compares its models (greedy, every easy, medium and hard held-out task),
paired with the reference's SFT model task by task; with ``--grpo`` GRPO is run on it with the
reference's settings and its RL model evaluated the same way, paired with the SFT model it started
from and with each model of ``--results LABEL=FILE`` (the shipped RL model's held-out results,
say). ``--levers plans`` trains only the varied teacher's model and ``--samples 0`` skips the
validation table.

    python benchmarks/sft_levers.py --source runs/reference --run-dir runs/levers

``--source`` is a finished reference run (its trajectories and its two-epoch SFT checkpoint), or a
run that ``world_size.py`` built (its SFT model and held-out results included);
``--run-dir`` gets links to the source's inputs and the new models. Resumable: a rerun skips the
training and the samples that are done.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

#: A run's stage folders that the lever models do not share with the source run.
OWN = {"sft", "grpo", "eval", "comparison", "passk", "sft-average", "plans", "hops", "reading",
       "next", "copy", "deep", "fresh", "run_manifest.json"}
#: The teacher levers: each writes its own trajectories of the same tasks, in ``RUN_DIR/<lever>``.
TEACHER_LEVERS = ("plans", "hops", "reading", "next", "copy")
#: The levers whose SFT model is compared with the reference's on the held-out tasks.
HELDOUT_LEVERS = (*TEACHER_LEVERS, "deep", "fresh")


def link_inputs(source: Path, run: Path, own: set[str] = OWN) -> None:
    """Link the source run's world, tasks, trajectories and caches (all but ``own``) to ``run``."""
    run.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        target = run / entry.name
        if entry.name not in own and not target.exists():
            target.symlink_to(entry.resolve())


def distinct_per_task(run: Path) -> tuple[int, int, int]:
    """``(accepted, tasks, distinct)``: a run's accepted trajectories, their tasks, and how many
    of them differ."""
    from vsearcher_lite.runio import read_jsonl
    from vsearcher_lite.synthesis.trajectories import n_distinct

    accepted = list(read_jsonl(run / "trajectories" / "accepted.jsonl"))
    return len(accepted), len({t["task_id"] for t in accepted}), n_distinct(accepted)


def average_checkpoint(first: Path, second: Path, out: Path) -> Path:
    """The weights of ``first`` and ``second`` averaged into ``out`` (the rest copied from
    ``second``); skipped when ``out`` exists."""
    from safetensors.torch import load_file, save_file

    if (out / "model.safetensors").exists():
        return out
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    if a.keys() != b.keys():
        raise SystemExit(f"{first} and {second} hold different weights; cannot average them")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(second, tmp)
    save_file({k: (a[k].float() + b[k].float()).div(2).to(b[k].dtype) for k in b},
              str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tmp.rename(out)
    return out


def deeper_base(out: Path, factor: int) -> Path:
    """The shipped base grown to ``factor`` times its text layers, saved in ``out`` (skipped when
    it is there)."""
    from vsearcher_lite.model.tiny import grow_depth, load_base, save_base

    if not (out / "config.json").exists():
        model, processor = load_base()
        save_base(grow_depth(model, factor), processor, out)
    return out


def reference_sft_config(device: str, **changes):
    """The reference's SFT settings with ``changes`` on top, checked."""
    from vsearcher_lite.reference import REFERENCE_SFT
    from vsearcher_lite.reference_run import full_length
    from vsearcher_lite.training.config import SFTConfig

    return full_length(SFTConfig.for_profile("cpu", device=device), {**REFERENCE_SFT, **changes})


def source_epochs(source: Path) -> float:
    """The epochs the source run's SFT was trained for, so that a lever trains as many steps: the
    reference's when the source holds the shipped checkpoint without its metrics; a bigger world's
    run takes the shipped SFT's steps, so fewer epochs."""
    from vsearcher_lite.reference import REFERENCE_SFT
    from vsearcher_lite.runio import read_json

    metrics = source / "sft" / "metrics.json"
    if not metrics.exists():
        return float(REFERENCE_SFT["epochs"])
    return float(read_json(metrics)["settings"]["epochs"])


def reference_grpo(run: Path, device: str) -> Path:
    """The reference's GRPO from the run's SFT model, unless its checkpoint is there; the RL
    checkpoint."""
    from vsearcher_lite.reference import REFERENCE_GRPO
    from vsearcher_lite.reference_run import full_length
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.rl.grpo import run_grpo

    checkpoint = run / "grpo" / "checkpoint"
    if not (checkpoint / "config.json").exists():
        run_grpo(run, full_length(GRPOConfig.for_profile("cpu", device=device), REFERENCE_GRPO))
    return checkpoint


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", required=True, help="a finished reference run folder")
    p.add_argument("--run-dir", required=True, help="a run folder of its own (created if missing)")
    p.add_argument("--samples", type=int, default=4,
                   help="samples per validation task (default 4; 0: no Pass@k table)")
    p.add_argument("--max-tasks", type=int, default=None,
                   help="the first N validation tasks, round-robin over the levels (default: all)")
    p.add_argument("--without-source", action="store_true",
                   help="sample only the levers' models, not the source's SFT model (a reference "
                        "run has its samples: results/validation-sft-s*.jsonl, the same tasks and "
                        "settings when --max-tasks and --samples are the reference's)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto (default cpu)")
    p.add_argument("--levers", default="epochs,plans",
                   help="which levers to train and sample beside the reference's model: epochs "
                        "(one epoch, and its average with two), plans (several plans per task), "
                        "hops (a teacher that plans its hops), reading (its plan in the "
                        "question's order), next (reading, and each search's line written "
                        "first), copy (next, the line as the plan writes it), deep (a deeper "
                        "base), fresh (the loss weighted on what tool responses brought in); "
                        "comma-separated (default: epochs,plans)")
    p.add_argument("--plan-variety", type=float, default=0.5,
                   help="the varied teacher's plan_variety (default 0.5)")
    p.add_argument("--depth-factor", type=int, default=2,
                   help="the deep lever's text layers per layer of the shipped base (default 2)")
    p.add_argument("--fresh-weight", type=float, default=5.0,
                   help="the fresh lever's SFT fresh_weight (default 5)")
    p.add_argument("--heldout", action="store_true",
                   help="also evaluate each teacher, deep or fresh lever's SFT model on the "
                        "held-out tasks")
    p.add_argument("--grpo", action="store_true",
                   help="with --heldout: also run the reference's GRPO on those models")
    p.add_argument("--results", action="append", default=[], metavar="LABEL=FILE",
                   help="with --heldout: held-out results evaluated elsewhere (the shipped RL "
                        "model's, say), added to the table; with --grpo each lever's RL model is "
                        "paired with them too")
    args = p.parse_args()
    levers = {x.strip() for x in args.levers.split(",") if x.strip()}
    if not levers or levers - {"epochs", *HELDOUT_LEVERS}:
        p.error(f"--levers takes epochs, plans, hops, reading, next, copy, deep and fresh, "
                f"got {args.levers!r}")
    if args.heldout and not levers & set(HELDOUT_LEVERS):
        p.error("--heldout evaluates the teacher, deep and fresh levers' models: add plans, hops, "
                "reading, next, copy, deep or fresh to --levers")
    if args.depth_factor < 2:
        p.error(f"--depth-factor must be at least 2, got {args.depth_factor}")

    from vsearcher_lite.synthesis.trajectories import TrajectoryConfig, generate_trajectories
    from vsearcher_lite.training.sft import run_sft

    source, run = Path(args.source), Path(args.run_dir)
    late = source / "sft" / "checkpoint"
    if not (late / "config.json").exists():
        raise SystemExit(f"{late}: no SFT checkpoint; run `vsearcher-lite reference run` first")
    link_inputs(source, run)
    models, teachers = [("source", late)], [("default", source)]
    if "epochs" in levers:
        early = run / "sft" / "checkpoint"
        if not (early / "config.json").exists():
            run_sft(run, reference_sft_config(args.device, epochs=1.0))
        averaged = average_checkpoint(early, late, run / "sft-average" / "checkpoint")
        models += [("one-epoch", early), ("average", averaged)]

    trained = []  # the run folders of the levers compared on the held-out tasks
    teacher_settings = {  # each teacher lever's label and trajectory settings
        "plans": (f"plan variety {args.plan_variety}", {"plan_variety": args.plan_variety}),
        "hops": ("hop plan", {"hop_plan": True}),
        "reading": ("hop plan, reading order", {"hop_plan": True, "hop_plan_order": "reading"}),
        "next": ("hop plan, reading order, next line", {
            "hop_plan": True, "hop_plan_order": "reading", "hop_plan_next": True}),
        "copy": ("hop plan, reading order, next line as planned", {
            "hop_plan": True, "hop_plan_order": "reading", "hop_plan_next": True,
            "hop_plan_next_form": "plan"})}
    for lever in (x for x in TEACHER_LEVERS if x in levers):
        folder = run / lever
        link_inputs(source, folder, OWN | {"trajectories"})
        label, settings = teacher_settings[lever]
        generate_trajectories(folder, TrajectoryConfig.for_profile(
            "cpu", progress=False, **settings))  # stored rollouts are reused
        checkpoint = folder / "sft" / "checkpoint"
        if not (checkpoint / "config.json").exists():
            run_sft(folder, reference_sft_config(args.device))
        models.append((lever, checkpoint))
        teachers.append((label, folder))
        trained.append(folder)
    # the levers that train the source's SFT on its own trajectories with one change: a deeper
    # base, or the fresh-token loss weight
    model_changes = {"deep": lambda folder: {"base": str(deeper_base(folder / "base",
                                                                     args.depth_factor))},
                     "fresh": lambda folder: {"fresh_weight": args.fresh_weight}}
    for lever in (x for x in model_changes if x in levers):
        folder = run / lever
        link_inputs(source, folder)
        checkpoint = folder / "sft" / "checkpoint"
        if not (checkpoint / "config.json").exists():
            run_sft(folder, reference_sft_config(args.device, epochs=source_epochs(source),
                                                 **model_changes[lever](folder)))
        models.append((lever, checkpoint))
        trained.append(folder)

    for label, folder in teachers:
        n, n_tasks, distinct = distinct_per_task(folder)
        print(f"{label}: {n} accepted trajectories of {n_tasks} tasks, {distinct} distinct")
    sampled = models[1:] if args.without_source else models
    if args.samples > 0 and sampled:
        validation_passk(source, run, sampled, args.samples, args.max_tasks, args.device,
                         prefix="levers")
    if args.heldout:
        from vsearcher_lite.reference import headline
        from vsearcher_lite.scoring.evaluate import load_results

        given = given_results(args.results)
        results = {"reference SFT": headline(load_results(source, "heldout-sft")), **given}
        pairs = []
        for folder in trained:
            lever = folder.name
            heldout(source, run, folder / "sft" / "checkpoint", f"heldout-{lever}", args.device)
            results[f"{lever} SFT"] = load_results(run, f"heldout-{lever}")
            pairs += lever_pairs(lever, args.grpo, list(given))
            if args.grpo:
                rl = reference_grpo(folder, args.device)
                heldout(source, run, rl, f"heldout-{lever}-rl", args.device)
                results[f"{lever} RL"] = load_results(run, f"heldout-{lever}-rl")
        print_paired(results, pairs)
    return 0


def validation_passk(source: Path, run: Path, models: list[tuple[str, Path]], samples: int,
                     max_tasks: int | None, device: str, prefix: str,
                     temperature: float = 1.0) -> None:
    """Sample each model ``samples`` times at ``temperature`` on the source's easy, medium and
    hard validation tasks (the first ``max_tasks``, round-robin over the levels), as
    ``RUN/eval/<prefix>-<model>`` (resumable), and print Pass@1, Pass@k, the tasks solved
    sometimes but not always, and the share of well-formed episodes, per model and level."""
    from vsearcher_lite.agent.task import read_tasks
    from vsearcher_lite.evaluation.comparison import ComparisonConfig
    from vsearcher_lite.reference import HEADLINE_LEVELS
    from vsearcher_lite.scoring.evaluate import load_results
    from vsearcher_lite.scoring.passk import evaluate_samples, sample_names
    from vsearcher_lite.training.heldout import balanced_head

    tasks = [t for t in read_tasks(source / "filter" / "validation.jsonl")
             if t.difficulty in HEADLINE_LEVELS]
    tasks = balanced_head(tasks, max_tasks, key=lambda t: t.difficulty)
    config = ComparisonConfig.for_profile("cpu", eval_overrides={
        "device": device, "temperature": temperature}).heldout_eval_config()
    rows = []
    for name, checkpoint in models:
        m = evaluate_samples(run, tasks, f"transformers:{checkpoint}", config=config,
                             samples=samples, benchmark="validation", name=f"{prefix}-{name}")
        episodes = [r for sample in sample_names(f"{prefix}-{name}", samples)
                    for r in load_results(run, sample)]
        rows.append((name, m, episodes))
    k = max(int(x) for x in rows[0][1]["pass_at_k"])
    print(f"{len(tasks)} validation tasks, {samples} samples each at T {temperature:g}")
    print(f"{'model':11} {'level':7} {'tasks':>5} {'Pass@1':>7} {f'Pass@{k}':>7} {'mixed':>5} "
          f"{'format':>7}")
    for name, m, episodes in rows:
        for level in ("all", *m["by_level"]):
            g = m if level == "all" else m["by_level"][level]  # the same fields, all tasks
            at = [r for r in episodes if level == "all" or r["difficulty"] == level]
            print(f"{name if level == 'all' else '':11} {level:7} {g['n_tasks']:5d} "
                  f"{g['pass_at_k']['1']:7.3f} {g['pass_at_k'][str(k)]:7.3f} {g['mixed']:5d} "
                  f"{sum(r['format_ok'] for r in at) / max(len(at), 1):7.3f}")


def given_results(specs: list[str]) -> dict[str, list[dict]]:
    """``--results LABEL=FILE`` options as label -> the file's easy, medium and hard records."""
    from vsearcher_lite.reference import headline
    from vsearcher_lite.runio import read_jsonl

    given = {}
    for spec in specs:
        label, _, path = spec.partition("=")
        given[label] = headline(list(read_jsonl(path)))
    return given


def lever_pairs(lever: str, grpo: bool, others: list[str]) -> list[tuple[str, str]]:
    """The paired rows of a lever: its SFT model against the reference's and, with ``grpo``, its RL
    model against its own SFT model and against each model of ``others`` (``--results``).

    >>> lever_pairs("deep", True, ["reference RL"])
    [('reference SFT', 'deep SFT'), ('deep SFT', 'deep RL'), ('reference RL', 'deep RL')]
    >>> lever_pairs("deep", False, ["reference RL"])
    [('reference SFT', 'deep SFT')]
    """
    pairs = [("reference SFT", f"{lever} SFT")]
    if grpo:
        pairs += [(f"{lever} SFT", f"{lever} RL"), *((label, f"{lever} RL") for label in others)]
    return pairs


def heldout(source: Path, run: Path, checkpoint: Path, name: str, device: str) -> None:
    """Evaluate ``checkpoint`` greedily on the source's easy, medium and hard held-out tasks with
    the comparison's settings, as ``RUN/eval/<name>``."""
    heldout_policy(source, run, f"transformers:{checkpoint}", name, device)


def heldout_policy(source: Path, run: Path, policy: str, name: str, device: str) -> None:
    """``heldout`` for any policy spec (``teacher``, say)."""
    from vsearcher_lite.agent.task import read_tasks
    from vsearcher_lite.evaluation.comparison import ComparisonConfig
    from vsearcher_lite.reference import HEADLINE_LEVELS
    from vsearcher_lite.scoring.evaluate import evaluate

    tasks = [t for t in read_tasks(source / "filter" / "heldout.jsonl")
             if t.difficulty in HEADLINE_LEVELS]
    config = ComparisonConfig.for_profile("cpu", eval_overrides={"device": device})
    evaluate(run, tasks, policy, config=config.heldout_eval_config(), benchmark="heldout",
             name=name)


def print_paired(results: dict[str, list[dict]], pairs: list[tuple[str, str]]) -> None:
    """Pass@1, tool calls and format-valid per model and level, then the second model of each
    pair paired with the first, task by task."""
    from vsearcher_lite.reference import HEADLINE_LEVELS, paired

    def at(level: str, records: list[dict]) -> list[dict]:
        return [r for r in records if level == "all" or r["difficulty"] == level]

    print(f"{len(next(iter(results.values())))} held-out tasks, greedy")
    print(f"{'model':14} {'level':7} {'tasks':>5} {'Pass@1':>7} {'calls':>6} {'format':>7}")
    for name, records in results.items():
        for level in ("all", *HEADLINE_LEVELS):
            group = at(level, records)
            n = max(len(group), 1)
            print(f"{name:14} {level:7} {len(group):5d} {sum(r['correct'] for r in group) / n:7.3f}"
                  f" {sum(r['n_tool_calls'] for r in group) / n:6.2f}"
                  f" {sum(r['format_ok'] for r in group) / n:7.3f}")
    for first, second in pairs:
        for level in ("all", *HEADLINE_LEVELS):
            d = paired(at(level, results[first]), at(level, results[second]))
            print(f"{second} - {first}, {level}: {d['mean']:+.4f} (SE {d['se']:.4f}, n {d['n']}; "
                  f"{d['gained']} gained, {d['lost']} lost)")


if __name__ == "__main__":
    raise SystemExit(main())
