"""Training on several processes, on the CPU with gloo: what the multi_gpu profile does on GPUs.

- The SFT loss and gradient norm of two processes equal one process's over the same
  micro-batches (``torchrun`` and the ``sft`` command): a loss divided by every process's token
  count but not multiplied back would halve both.
- accelerate's FSDP2 wrap with the shipped ``configs/accelerate/fsdp.yaml`` settings keeps the
  frozen vision tower frozen and unchanged through a step.
- GRPO refuses, in one line per process and before any model loads, the launches it cannot keep
  in step: the TRL engine decoding with the training model (each process would decode a
  different number of steps while FSDP gathers weights at every forward) and the cpu engine.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from agent_fakes import write_sft_file

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which(
    "torchrun")
pytestmark = pytest.mark.skipif(TORCHRUN is None, reason="torch's torchrun launcher is missing")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_thread_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "VSEARCHER_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def launch(processes: int, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """``vsearcher-lite ARGS`` on ``processes`` processes under torchrun (gloo on the CPU)."""
    command = [TORCHRUN, "--nproc_per_node", str(processes), "--master_port", str(free_port()),
               "-m", "vsearcher_lite", *args]
    return subprocess.run(command, cwd=ROOT, env=one_thread_env(), capture_output=True,
                          text=True, timeout=timeout)


def read_loss(run: Path) -> list[dict]:
    with (run / "sft" / "loss.csv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def uneven_train_file(tmp_path_factory):
    """Four trajectories of different lengths: a mean over the wrong token count shows."""
    path = write_sft_file(tmp_path_factory.mktemp("sft_data"), 4)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(rows):
        row["messages"][-1]["content"][0]["text"] += " The page says so." * (3 * i)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow  # three training processes start: about 25 s on 2 cores
def test_two_processes_train_with_one_process_loss(uneven_train_file, tmp_path):
    """The multi_gpu profile's full fine-tune, 2 steps: 2 processes x 1 trajectory against 1
    process x 2 accumulated trajectories (the same micro-batches, in the same order)."""
    common = ["sft", "--profile", "multi_gpu", "--base", str(ROOT / "data" / "tiny_base"),
              "--device", "cpu", "--dtype", "float32", "--max-steps", "2", "--batch-size", "1",
              "--train-file", str(uneven_train_file), "--no-eval", "--threads", "1",
              "--lr", "1e-3", "--markup-init"]
    one = launch(1, *common, "--grad-accum", "2", "--run-dir", str(tmp_path / "one"))
    two = launch(2, *common, "--grad-accum", "1", "--run-dir", str(tmp_path / "two"))
    assert one.returncode == 0, one.stderr[-2000:]
    assert two.returncode == 0, two.stderr[-2000:]
    a, b = read_loss(tmp_path / "one"), read_loss(tmp_path / "two")
    assert [r["step"] for r in a] == [r["step"] for r in b] == ["1", "2"]
    for x, y in zip(a, b):
        for key in ("loss", "grad_norm"):
            assert float(y[key]) == pytest.approx(float(x[key]), rel=1e-4), (key, x, y)


def fsdp_worker(rank: int, world: int, port: int, out: str) -> None:
    """One process of the FSDP2 check: the tiny base in bf16, its vision tower frozen as the sft
    stage freezes it, wrapped by accelerate's FSDP2 with the shipped config, one AdamW step."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    import torch
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    from torch.distributed.tensor import DTensor

    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training.checkpoint import freeze_vision

    torch.set_num_threads(1)
    shipped = yaml.safe_load((ROOT / "configs" / "accelerate" / "fsdp.yaml").read_text())
    fsdp = shipped["fsdp_config"]
    accelerator = Accelerator(cpu=True, mixed_precision=shipped["mixed_precision"])
    accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin(
        fsdp_version=fsdp["fsdp_version"], auto_wrap_policy="transformer_based_wrap",
        transformer_cls_names_to_wrap=fsdp["fsdp_transformer_layer_cls_to_wrap"].split(","),
        reshard_after_forward=fsdp["fsdp_reshard_after_forward"],
        state_dict_type=fsdp["fsdp_state_dict_type"],
        cpu_ram_efficient_loading=fsdp["fsdp_cpu_ram_efficient_loading"],
        mixed_precision_policy=shipped["mixed_precision"])
    model, _ = load_base(None, dtype=torch.bfloat16)
    frozen = freeze_vision(model)
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    model = fsdp2_prepare_model(accelerator, model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(0, 100, (1, 24), generator=torch.Generator().manual_seed(rank))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    after = {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float()
             for n, p in model.named_parameters()}
    report = {
        "frozen": frozen,
        "wrapped": type(model).__name__,
        "vision_trainable": [n for n, p in model.named_parameters()
                             if "visual" in n and p.requires_grad],
        "vision_changed": [n for n in after if "visual" in n and not after[n].equal(before[n])],
        "text_changed": sum(not after[n].equal(before[n]) for n in after
                            if "language_model" in n),
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(report), encoding="utf-8")
    torch.distributed.destroy_process_group()


def test_fsdp2_keeps_the_frozen_vision_tower_frozen(tmp_path, monkeypatch):
    import torch.multiprocessing as mp

    for key, value in one_thread_env().items():
        monkeypatch.setenv(key, value)
    mp.start_processes(fsdp_worker, args=(2, free_port(), str(tmp_path)), nprocs=2,
                       start_method="spawn")
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["frozen"] > 0 and report["wrapped"].startswith("FSDP")
        assert report["vision_trainable"] == [] and report["vision_changed"] == []
        assert report["text_changed"] > 0  # the step did train the language model


@pytest.mark.parametrize("args, refusal", [
    (["--profile", "multi_gpu", "--no-vllm"], "--no-vllm on 2 processes"),
    (["--profile", "cpu"], "the cpu engine runs on one process, not 2"),
], ids=["trl-without-vllm", "cpu-engine"])
def test_grpo_refuses_a_launch_it_cannot_keep_in_step(tmp_path, args, refusal):
    done = launch(2, "grpo", *args, "--device", "cpu", "--run-dir", str(tmp_path / "run"),
                  timeout=120)
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if refusal in line]
    assert len(lines) == 2, done.stderr[-2000:]  # one line from each process
    assert all(line.startswith("vsearcher-lite grpo: error: ") for line in lines)
    assert not (tmp_path / "run" / "grpo").exists()  # refused before anything was written
