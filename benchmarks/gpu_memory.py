"""Peak GPU memory of the GPU profiles' steps, on random weights in the Qwen3-VL 8B or 2B shape.

Builds the weights once (bf16, from the published config, with the published ids and file
layout: ``model.real_shape``) in ``--model-dir``, then measures each stage in a process of its
own under a time limit, so one that runs out of memory does not end the others:

- ``sft-<method>-<tokens>``: one step of the sft stage itself (TRL's SFTTrainer, the
  single_gpu profile's LoRA or QLoRA, gradient checkpointing) on one trajectory of 4K, 8K, 16K
  or 20,480 tokens (text only; half of it assistant turns);
- ``grpo-logprob-30720-mb<B>``: the log-probability forward and backward of a GRPO update at
  2K prompt + 28K response tokens, micro-batches of 1 and 4, through TRL's fused output layer
  as ``GRPOTrainer`` runs it, LoRA;
- ``kv-16x8192``: the KV engine (``chat.engine``) decoding 64 tokens on 16 rows of 8K.

Writes JSON (``--out``): the GPU, and per stage its peak allocated and reserved GiB, seconds and
how it ended (``ok``, ``oom``, ``timeout``, ``error``). Needs a CUDA GPU and the gpu extra.

    python benchmarks/gpu_memory.py --model-dir /scratch/qwen3-vl-8b-random --size 8B
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SFT_TOKENS = (4096, 8192, 16384, 20480)
GRPO_PROMPT, GRPO_RESPONSE = 2048, 28672
KV_ROWS, KV_TOKENS, KV_NEW = 16, 8192, 64
STAGES = ([f"sft-{m}-{n}" for m in ("qlora", "lora") for n in SFT_TOKENS]
          + [f"grpo-logprob-{GRPO_PROMPT + GRPO_RESPONSE}-mb{b}" for b in (1, 4)]
          + [f"kv-{KV_ROWS}x{KV_TOKENS}"])
GIB = 1024 ** 3
FILLER = "The bridge over the river was built in the year the town was founded. "


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True, type=Path,
                   help="folder of the random-weight checkpoint (built there when missing)")
    p.add_argument("--size", default="8B", choices=("8B", "2B"), help="the published shape")
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES, metavar="STAGE",
                   help=f"stages to measure (default: all: {' '.join(STAGES)})")
    p.add_argument("--stage-seconds", type=float, default=600.0,
                   help="time limit of each stage, loading included (default 600)")
    p.add_argument("--out", type=Path, default=Path("gpu_memory.json"), help="JSON written here")
    p.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # a stage's own process
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------
# The stages, each in its own process


def peak(torch, t0: float) -> dict:
    torch.cuda.synchronize()
    return {"peak_allocated_gib": round(torch.cuda.max_memory_allocated() / GIB, 2),
            "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / GIB, 2),
            "seconds": round(time.perf_counter() - t0, 2)}


def long_record(processor, tokens: int) -> dict:
    """One trajectory of about ``tokens`` tokens as TRL renders it: a question, then an answer
    turn holding half the tokens (what SFT trains) and a tool response the other half."""
    from vsearcher_lite.training.data import rendered_lengths

    def record(repeats: int) -> dict:
        text = FILLER * repeats
        turns = [("system", "You are a search agent."), ("user", "In which year?"),
                 ("assistant", f"<think>\n{text}\n</think>\n<tool_call>\n"
                               '{"name": "text_search", "arguments": {"query": "year"}}\n'
                               "</tool_call>"),
                 ("user", f"<tool_response>\n{text}\n</tool_response>"),
                 ("assistant", "<think>\nFound it.\n</think>\n<answer>1874</answer>")]
        return {"messages": [{"role": r, "content": [{"type": "text", "text": t}]}
                             for r, t in turns], "images": []}

    repeats = 64
    for _ in range(3):  # the length is near-linear in the repeats
        n = rendered_lengths(processor, [record(repeats)])[0]
        repeats = max(1, round(repeats * tokens / n))
    return record(repeats)


def sft_stage(model_dir: Path, method: str, tokens: int) -> dict:
    """One step of ``run_sft`` on one trajectory of ``tokens`` tokens; the peak is the step's
    (the weights included)."""
    import torch
    from transformers import AutoProcessor

    import vsearcher_lite.model.tiny  # noqa: F401  (registers the image-only processor)
    from vsearcher_lite.training.config import SFTConfig
    from vsearcher_lite.training.sft import run_sft

    processor = AutoProcessor.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "sft_trl.jsonl"
        data.write_text(json.dumps(long_record(processor, tokens)) + "\n", encoding="utf-8")
        config = SFTConfig.for_profile(
            "single_gpu", base=str(model_dir), method=method, device="cuda", dtype="bfloat16",
            max_steps=1, batch_size=1, grad_accum=1, max_length=tokens + 512, evaluate=False,
            progress=False, train_file=str(data))
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        metrics = run_sft(Path(scratch) / "run", config, log=lambda s: None)
        out = peak(torch, t0)
    return {**out, "lengths": metrics["lengths"], "trained_steps": metrics["steps"]}


def grpo_stage(model_dir: Path, micro_batch: int) -> dict:
    """The update's log-probability pass: TRL's fused output layer (no vocabulary-wide logits),
    LoRA on the language model, gradient checkpointing; forward and backward of ``micro_batch``
    rows of 2K prompt + 28K response."""
    import torch
    from peft import get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.rl.config import GRPOConfig
    from vsearcher_lite.training.checkpoint import freeze_vision, lora_config

    config = GRPOConfig.for_profile("single_gpu", device="cuda")
    model, _ = load_base(model_dir, dtype=torch.bfloat16, device="cuda")
    freeze_vision(model)
    add_fused_lm_head(model, temperature=config.temperature)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = get_peft_model(model, lora_config(config))
    model.enable_input_require_grads()
    length = GRPO_PROMPT + GRPO_RESPONSE
    ids = torch.randint(0, 150_000, (micro_batch, length), device="cuda",
                        generator=torch.Generator("cuda").manual_seed(0))
    labels = ids.clone()
    labels[:, :GRPO_PROMPT] = -100
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels,
                fused_lm_head=True)
    out.loss.backward()
    return {**peak(torch, t0), "tokens": length, "micro_batch": micro_batch}


def kv_stage(model_dir: Path) -> dict:
    """The KV engine's prefill of 16 rows of 8K tokens and 64 decode steps (no early end)."""
    import torch

    from vsearcher_lite.chat.engine import KVEngine
    from vsearcher_lite.model.tiny import load_base

    model, processor = load_base(model_dir, dtype=torch.bfloat16, device="cuda")
    model.eval()
    tokenizer = processor.tokenizer
    piece = len(tokenizer(FILLER, add_special_tokens=False)["input_ids"])
    text = FILLER * max(1, KV_TOKENS // piece)
    rows = [[{"role": "user", "content": [{"type": "text", "text": f"{i}. {text}"}]}]
            for i in range(KV_ROWS)]
    engine = KVEngine(model, processor, max_slots=4 * KV_ROWS)
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with torch.no_grad():
        replies = engine.generate(rows, list(range(KV_ROWS)), list(range(KV_ROWS)),
                                  max_new_tokens=KV_NEW, temperature=0.6, top_p=0.9)
    return {**peak(torch, t0), "rows": KV_ROWS, "prompt_tokens": replies[0].prompt_tokens,
            "new_tokens": len(replies[0].text_tokens)}


def run_stage(name: str, model_dir: Path) -> dict:
    kind, _, rest = name.partition("-")
    if kind == "sft":
        method, tokens = rest.split("-")
        return sft_stage(model_dir, method, int(tokens))
    if kind == "grpo":
        return grpo_stage(model_dir, int(rest.rsplit("mb", 1)[1]))
    return kv_stage(model_dir)


# ---------------------------------------------------------------------------------------------
# The driver


def measure(name: str, args) -> dict:
    """``name`` in a process of its own under the time limit; what it reported, or how it
    failed."""
    command = [sys.executable, str(Path(__file__).resolve()), "--stage", name,
               "--model-dir", str(args.model_dir), "--size", args.size]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                              timeout=args.stage_seconds)
    except subprocess.TimeoutExpired:
        return {"stage": name, "status": "timeout", "seconds": round(args.stage_seconds, 1)}
    wall = round(time.perf_counter() - t0, 1)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return {"stage": name, "status": "ok", "wall_seconds": wall, **json.loads(lines[-1])}
    oom = "out of memory" in done.stderr.lower() or "OutOfMemoryError" in done.stderr
    last = (done.stderr.strip().splitlines() or ["no output"])[-1][:500]
    return {"stage": name, "status": "oom" if oom else "error", "wall_seconds": wall,
            "error": last}


def ensure_model(model_dir: Path, size: str) -> None:
    """The random-weight checkpoint, built on the GPU the first time (then reused)."""
    from vsearcher_lite.model.real_shape import build_real_shape_checkpoint

    if (model_dir / "config.json").is_file():
        return
    t0 = time.perf_counter()
    build_real_shape_checkpoint(model_dir, size=size, layers=None, shard_size="5GB",
                                device="cuda")
    print(f"[gpu_memory] built random {size} weights in {model_dir} "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_memory.py: no CUDA device here; it measures GPU memory, run it on a GPU",
              file=sys.stderr)
        return 1
    if args.stage:  # one stage's own process: its numbers as one JSON line
        print(json.dumps(run_stage(args.stage, args.model_dir)), flush=True)
        return 0
    ensure_model(args.model_dir, args.size)
    props = torch.cuda.get_device_properties(0)
    report = {"gpu": props.name, "gpu_memory_gib": round(props.total_memory / GIB, 1),
              "size": args.size, "model_dir": str(args.model_dir), "torch": torch.__version__,
              "stage_seconds": args.stage_seconds, "stages": []}
    for name in args.stages:
        row = measure(name, args)
        report["stages"].append(row)
        print(f"[gpu_memory] {name}: {row['status']}, peak "
              f"{row.get('peak_allocated_gib', '-')} GiB allocated", flush=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
