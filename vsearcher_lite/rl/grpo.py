"""Stage `grpo`: multi-turn GRPO in the search environment (paper 2.3, A.4); the engine dispatch.

``run_grpo(run_dir, config) -> metrics`` evaluates the SFT checkpoint greedily on the held-out
tasks (``eval/sft``, reused after a re-run check), trains, saves ``RUN_DIR/grpo/checkpoint`` in
the SFT checkpoint's layout (an evaluation policy as ``transformers:RUN_DIR/grpo/checkpoint``),
evaluates it on the same tasks (``eval/rl``) and reports their paired difference with its
standard error. ``config.engine`` picks ``cpu`` (a plain PyTorch loop) or ``trl`` (TRL's
``GRPOTrainer``, the GPU profiles). ``RUN_DIR/grpo/`` also holds ``steps.csv``,
``rollouts.jsonl`` (one summary per trajectory) and ``metrics.json``.

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
    """Train, save, evaluate; returns the metrics (also in ``RUN_DIR/<name>/metrics.json``).
    ``config`` as ``GRPOConfig.for_profile`` checked and resolved it (default: the cpu
    profile's); the run reads its values and looks nothing up."""
    config = config or GRPOConfig.for_profile("cpu")
    if config.engine == "trl":
        return run_grpo_trl(run_dir, config, log=log)
    return run_grpo_cpu(run_dir, config, log=log)
