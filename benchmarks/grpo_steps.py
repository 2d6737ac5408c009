"""The reference's GRPO trained for longer: held-out Pass@1 every few steps.

The reference stops GRPO after ``REFERENCE_GRPO["max_steps"]`` steps. This runs the same GRPO (the
reference's settings, from the run's SFT checkpoint, its pre-screen first) for ``--steps`` steps
as ``RUN_DIR/<--name>``, keeping the model every ``--every`` steps (``checkpoint_every``; an
interrupted run resumes from its last kept step), then evaluates the models of ``--evaluate``
steps as the reference compares its models (greedy, every easy, medium and hard held-out task;
``RUN_DIR/eval/heldout-<name>-stepN``, resumable). Prints Pass@1, tool calls and format-valid
by level, each model paired task by task with the SFT model and with the model before it in the
table. ``--results LABEL=FILE`` adds evaluated results to the table (the shipped RL model's, say);
``--exam`` also evaluates each model on the exam as the reference does and prints its Pass@1.
``--prescreen-samples K`` samples each RL-pool task K times in the pre-screen instead of as
often as the reference does: more samples find more tasks that the SFT model solves only now and
then. ``--hop-reward X`` gives a wrong answer X times the share of its chain's hops it resolved
(``GRPOConfig.hop_reward``), so that groups of tasks the SFT model never solves carry signal too.
``--temperature T`` samples the pre-screen and the rollouts at T instead of the reference's 1.0:
the SFT policy's per-token entropy is a few hundredths of a nat, so its samples at 1.0 rarely
leave its greedy path. ``--prescreen-unmixed drop`` trains only on the tasks with mixed outcomes,
leaving out a level that has none (the reference keeps such a level's tasks, whose groups are all
equal), and ``--prescreen-from DIR`` reads the pre-screen of an earlier GRPO run from the same SFT
model (``RUN_DIR/grpo``, say) instead of sampling the pool again.

    python benchmarks/grpo_steps.py --run-dir runs/reference --steps 20 --every 10 --evaluate 20 \\
        --results rl-10=data/reference/results/heldout-rl.jsonl

``--run-dir`` is a reference run with its SFT stage and that model's held-out results
(``eval/heldout-sft``): a finished reference run, or the source that ``sft_levers.py`` describes;
for a lever's run folder of ``sft_levers.py``, give its SFT model's results with ``--sft-results``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sft_levers import given_results, heldout, print_paired


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-dir", required=True, help="a reference run with sft/checkpoint")
    p.add_argument("--name", default="grpo-steps", help="the GRPO stage's folder (default "
                                                         "grpo-steps, apart from the reference's)")
    p.add_argument("--steps", type=int, default=20, help="GRPO steps (default 20)")
    p.add_argument("--every", type=int, default=10, help="keep the model every this many steps")
    p.add_argument("--evaluate", default=None,
                   help="comma-separated steps whose models are evaluated (default: every kept)")
    p.add_argument("--results", action="append", default=[], metavar="LABEL=FILE",
                   help="held-out results evaluated elsewhere, added before the steps")
    p.add_argument("--exam", action="store_true",
                   help="also evaluate the models on the exam (RUN_DIR/eval/exam-<name>-stepN)")
    p.add_argument("--prescreen-samples", type=int, default=None,
                   help="episodes per RL-pool task in the pre-screen (default: the reference's)")
    p.add_argument("--hop-reward", type=float, default=None,
                   help="GRPO's hop credit for wrong answers (default: the reference's, none)")
    p.add_argument("--temperature", type=float, default=None,
                   help="the pre-screen's and the rollouts' temperature (default: the reference's)")
    p.add_argument("--prescreen-unmixed", choices=("keep", "drop"), default=None,
                   help="a level without mixed tasks: kept whole (the reference's) or left out")
    p.add_argument("--prescreen-from", default=None,
                   help="an earlier GRPO folder (or its prescreen.jsonl) of the same SFT model")
    p.add_argument("--sft-results", default=None,
                   help="the SFT model's held-out results (default RUN_DIR/eval/heldout-sft)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto (default cpu)")
    args = p.parse_args()

    from vsearcher_lite.reference import headline
    from vsearcher_lite.rl.cpu_engine import kept_checkpoint
    from vsearcher_lite.rl.grpo import run_grpo
    from vsearcher_lite.runio import read_jsonl
    from vsearcher_lite.scoring.evaluate import load_results

    run = Path(args.run_dir)
    out = run / args.name
    if not (out / "checkpoint" / "config.json").exists():
        screen = {"prescreen_unmixed": args.prescreen_unmixed,
                  "prescreen_from": args.prescreen_from}
        run_grpo(run, stage_config(args.name, args.steps, args.every, args.prescreen_samples,
                                   args.device, args.hop_reward, args.temperature, **screen))
    steps = ([int(s) for s in args.evaluate.split(",")] if args.evaluate
             else list(range(args.every, args.steps + 1, args.every)))

    sft = (list(read_jsonl(args.sft_results)) if args.sft_results
           else load_results(run, "heldout-sft"))
    results = {"SFT": headline(sft), **given_results(args.results)}
    exams: dict[str, list[dict]] = {}
    for step in steps:
        kept = kept_checkpoint(out, step)
        if not kept.exists() and step == args.steps:
            kept = out / "checkpoint"  # a run resumed at its last step keeps only the final model
        name = f"heldout-{args.name}-step{step}"
        heldout(run, run, kept, name, args.device)
        results[f"step {step}"] = load_results(run, name)
        if args.exam:
            exams[f"step {step}"] = exam(run, kept, f"exam-{args.name}-step{step}", args.device)
    labels = list(results)
    pairs = [("SFT", label) for label in labels[1:]] + list(zip(labels[1:], labels[2:]))
    print_paired(results, pairs)
    for label, records in exams.items():
        n = max(len(records), 1)
        print(f"exam, {label}: Pass@1 {sum(r['correct'] for r in records) / n:.3f}, tool calls "
              f"{sum(r['n_tool_calls'] for r in records) / n:.2f} ({len(records)} tasks)")
    return 0


def stage_config(name: str, steps: int, every: int, prescreen_samples: int | None, device: str,
                 hop_reward: float | None = None, temperature: float | None = None,
                 **prescreen):
    """The reference's GRPO settings for a ``steps``-step stage named ``name`` that keeps its model
    every ``every`` steps, with ``prescreen_samples`` episodes per pre-screened task,
    ``hop_reward``, ``temperature`` and other pre-screen settings (``prescreen_unmixed``,
    ``prescreen_from``; None: the reference's), checked."""
    from vsearcher_lite.reference import REFERENCE_GRPO
    from vsearcher_lite.reference_run import full_length
    from vsearcher_lite.rl.config import GRPOConfig

    settings = {**REFERENCE_GRPO, "name": name, "max_steps": steps, "save_every": every,
                "checkpoint_every": every}
    if prescreen_samples is not None:
        settings["prescreen_samples"] = prescreen_samples
    if hop_reward is not None:
        settings["hop_reward"] = hop_reward
    if temperature is not None:
        settings["temperature"] = temperature
    settings.update({k: v for k, v in prescreen.items() if v is not None})
    return full_length(GRPOConfig.for_profile("cpu", device=device), settings)


def exam(run: Path, checkpoint: Path, name: str, device: str) -> list[dict]:
    """``checkpoint`` on the exam tasks the reference's comparison takes, with its exam settings
    (greedy, the exam's tool-call and context budget), as ``RUN/eval/<name>``; the records."""
    from vsearcher_lite.agent.task import read_tasks
    from vsearcher_lite.evaluation.comparison import ComparisonConfig, select_tasks
    from vsearcher_lite.reference import REFERENCE_COMPARISON
    from vsearcher_lite.reference_run import full_length
    from vsearcher_lite.scoring.evaluate import evaluate, load_results

    config = full_length(ComparisonConfig.for_profile("cpu", eval_overrides={"device": device}),
                         REFERENCE_COMPARISON)
    tasks = select_tasks({"exam": read_tasks(run / "filter" / "exam.jsonl")}, config)["exam"]
    evaluate(run, tasks, f"transformers:{checkpoint}", config=config.exam_eval_config(),
             benchmark="exam", name=name)
    return load_results(run, name)


if __name__ == "__main__":
    raise SystemExit(main())
