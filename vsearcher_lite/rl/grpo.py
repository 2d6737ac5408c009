"""Stage `grpo`: multi-turn GRPO in the search environment (paper 2.3, A.4); the engine dispatch.

``run_grpo(run_dir, config) -> metrics`` starts from the SFT checkpoint (``RUN_DIR/sft/checkpoint``
or ``config.init``), evaluates it greedily on the held-out tasks (``scoring.evaluate``, name
``sft``; stored results are reused after a re-run check), trains, saves ``RUN_DIR/grpo/checkpoint``
(the SFT checkpoint's layout, so ``transformers:RUN_DIR/grpo/checkpoint`` is an evaluation
policy), evaluates the RL model on the same tasks with the same settings (name ``rl``) and reports
their paired difference with its standard error. ``config.engine`` picks the engine:
``cpu`` is a plain PyTorch loop (``cpu_engine.py``); ``trl`` is TRL's ``GRPOTrainer``
(``trl_engine.py``, the GPU profiles). This module only dispatches; both engines use the same
inputs (``inputs.py``), rollouts (``rollout.py``), rules (``objective.py``), step log
(``steps.py``) and held-out evaluation (``paired_eval.py``), modules below both.

Outputs in ``RUN_DIR/grpo/``: ``checkpoint/``, ``steps.csv``, ``rollouts.jsonl`` (one summary per
trajectory, no token ids), ``metrics.json``. The evaluations are in ``RUN_DIR/eval/sft`` and
``RUN_DIR/eval/rl``.

Deviations from the paper (A.4), cpu profile: the 5M-parameter tiny model instead of
Qwen3-VL-8B; 4 prompts x 8 rollouts per step instead of 32 x 8; lr 5e-5 instead of 2e-6; two
updates per batch with clipping; a small KL to the SFT model (0.02) against the collapse seen on
small models without it; temperature 0.8; episodes bounded like the SFT evaluation (200 new tokens
per turn, 10 tool calls, 2,048 positions); training limited to what a 5.5-minute budget leaves after
the two evaluations; one-hop, easy and medium tasks 2 : 2 : 1 instead of easy, medium and hard
4 : 3 : 3 (the levels the tiny SFT model solves sometimes, so that groups have reward variance); the
offline match judge instead of Qwen2.5-72B.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.cpu_engine import run_grpo_cpu
from vsearcher_lite.rl.trl_engine import run_grpo_trl


def run_grpo(run_dir: str | Path, config: GRPOConfig | None = None, *,
             log: Callable[[str], None] = print) -> dict:
    """Train, save, evaluate; returns the metrics (also written to
    ``RUN_DIR/<name>/metrics.json``)."""
    config = config or GRPOConfig.for_profile("cpu")
    config.check()
    if config.engine == "trl":
        return run_grpo_trl(run_dir, config, log=log)
    return run_grpo_cpu(run_dir, config, log=log)
