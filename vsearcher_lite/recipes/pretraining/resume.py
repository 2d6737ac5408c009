"""Resuming a pretraining run: its state saved every few hundred steps and at each stage's end.

The state folder holds the model with its tokenizer, the optimizer of the stage under way, and
where the run stands (stage, step, the stage's clock, the log rows and the finished stages'
summaries). It is written beside itself and swapped in with one rename, so an interruption
leaves the previous state or the new one. A rerun of the same command reads it, draws the data
stream forward to the saved step (the stream is deterministic in the seed), and goes on; a rerun
with other training settings is refused, so that one base never mixes two recipes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from vsearcher_lite.runio import InputError, atomic_write_json, read_json, replace_dir

STATE_NAME = "state.json"
OPTIMIZER_NAME = "optimizer.pt"
MODEL_DIR = "model"
#: Settings that do not change what is trained: a rerun may give them differently.
FREE_SETTINGS = ("out_dir", "command", "progress", "threads", "device", "state_dir", "probes")


def fingerprint(config_dict: dict) -> dict:
    """The training settings a resumed run must share with the run that saved the state."""
    return {k: v for k, v in config_dict.items() if k not in FREE_SETTINGS}


def save_state(state_dir: str | Path, model, processor, optimizer, position: dict) -> None:
    """Write the state (``position``: stage, step, seconds, rows, summaries, ...) as one folder."""
    import torch

    from vsearcher_lite.model import tiny

    state_dir = Path(state_dir)
    state_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{state_dir.name}.tmp-", dir=state_dir.parent))
    try:
        tiny.save_base(model, processor, tmp / MODEL_DIR)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / OPTIMIZER_NAME)
        atomic_write_json(tmp / STATE_NAME, position)
        replace_dir(tmp, state_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_state(state_dir: str | Path, config_dict: dict) -> dict | None:
    """The saved position (with ``model_dir`` and ``optimizer``, a path or None), or None when
    there is no state; an ``InputError`` when it was saved by a run of other settings."""
    state_dir = Path(state_dir)
    if not (state_dir / STATE_NAME).is_file():
        return None
    position = read_json(state_dir / STATE_NAME)
    saved = position.get("fingerprint") or {}
    wanted = json.loads(json.dumps(fingerprint(config_dict)))  # tuples as the saved lists
    if saved != wanted:
        changed = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
        raise InputError(f"{state_dir}: a pretraining run of other settings was interrupted "
                         f"here ({', '.join(changed)} differ); rerun it with its settings, or "
                         "remove the folder to start afresh")
    optimizer = state_dir / OPTIMIZER_NAME
    return {**position, "model_dir": str(state_dir / MODEL_DIR),
            "optimizer": str(optimizer) if optimizer.is_file() else None}
