"""Stage `grpo`: multi-turn GRPO in the search environment (paper 2.3, A.4); the engine dispatch.

``run_grpo(run_dir, config) -> metrics`` evaluates the SFT checkpoint (``RUN_DIR/sft/checkpoint``
or ``config.init``) greedily on the held-out tasks (name ``sft``; stored results are reused after
a re-run check), trains, saves ``RUN_DIR/grpo/checkpoint`` in the SFT checkpoint's layout (so
``transformers:RUN_DIR/grpo/checkpoint`` is an evaluation policy), evaluates it on the same tasks
(name ``rl``) and reports their paired difference with its standard error. ``config.engine``
picks ``cpu`` (a plain PyTorch loop, ``cpu_engine``) or ``trl`` (TRL's ``GRPOTrainer``,
``trl_engine``, the GPU profiles); both share ``inputs``, ``rollout``, ``objective``, ``steps``
and ``paired_eval``.

Outputs in ``RUN_DIR/grpo/``: ``checkpoint/``, ``steps.csv``, ``rollouts.jsonl`` (one summary per
trajectory, no token ids), ``metrics.json``; the evaluations in ``RUN_DIR/eval/{sft,rl}``.
Deviations from the paper are the profiles' (``profiles/<profile>.toml``, each with its reason);
the cpu profile's small KL to the SFT model (0.02) guards against the collapse small models
show without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.cpu_engine import run_grpo_cpu
from vsearcher_lite.rl.trl_engine import run_grpo_trl


def run_grpo(run_dir: str | Path, config: GRPOConfig | None = None, *,
             log: Callable[[str], None] = print) -> dict:
    """Train, save, evaluate; returns the metrics (also in ``RUN_DIR/<name>/metrics.json``)."""
    config = config or GRPOConfig.for_profile("cpu")
    config.check()
    if config.engine == "trl":
        return run_grpo_trl(run_dir, config, log=log)
    return run_grpo_cpu(run_dir, config, log=log)
