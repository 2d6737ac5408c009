"""How much faster SFT's collate is with the tiny processor's mask walk, and what a step costs.

Collates the same trajectories one at a time (as the cpu preset trains) with transformers' own
``_adjust_assistant_masks_indices`` (a tensor walked element by element) and with
``Qwen3VLImageOnlyProcessor``'s override (nested lists), checks the ids and labels agree, then
times a training step of the tiny base on the same samples. Run it alone on the machine.

    python benchmarks/sft_collate.py --run-dir runs/reproduce --samples 40
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--run-dir", required=True, help="a run folder with trajectories/export/sft_trl.jsonl"
    )
    p.add_argument("--samples", type=int, default=40, help="trajectories drawn at random (seed 0)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    args = p.parse_args()

    import torch
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    from vsearcher_lite.runtime import set_threads
    from vsearcher_lite.training import checkpoint, data, sft
    from vsearcher_lite.training.config import SFTConfig

    set_threads(args.threads)
    path = Path(args.run_dir) / "trajectories" / "export" / "sft_trl.jsonl"
    records = data.load_sft_records(path)
    random.Random(0).shuffle(records)
    records = records[: args.samples]
    config = SFTConfig.for_profile("cpu")
    model, processor = checkpoint.load_model(config)
    sft.prepare_model(model, processor, config)
    dataset = data.to_dataset(records)
    items = [dataset[i] for i in range(len(records))]
    collator = data.make_collator(processor)

    def collate_all():
        start = time.perf_counter()
        batches = [collator([item]) for item in items]
        return batches, (time.perf_counter() - start) / len(items)

    fast_batches, fast_s = collate_all()
    cls = type(processor)
    override = cls.__dict__["_adjust_assistant_masks_indices"]
    cls._adjust_assistant_masks_indices = Qwen3VLProcessor._adjust_assistant_masks_indices
    try:
        slow_batches, slow_s = collate_all()
    finally:
        cls._adjust_assistant_masks_indices = override
    same = sum(
        all(a[k].tolist() == b[k].tolist() for k in ("labels", "input_ids"))
        for a, b in zip(fast_batches, slow_batches)
    )

    model.train()
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-5)

    def step(batch) -> None:
        out = model(**{k: v for k, v in batch.items() if k != "labels"}, use_cache=False)
        logits = out.logits[:, :-1].float()
        targets = batch["labels"][:, 1:].reshape(-1)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets, ignore_index=-100
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    step(fast_batches[0])  # warm-up
    start = time.perf_counter()
    for batch in fast_batches:
        step(batch)
    step_s = (time.perf_counter() - start) / len(fast_batches)
    tokens = sum(int(b["input_ids"].shape[1]) for b in fast_batches) / len(fast_batches)

    print(
        f"{len(items)} trajectories of {path} (mean {tokens:.0f} tokens), "
        f"torch threads {args.threads}"
    )
    print(f"collate, transformers' mask walk: {1000 * slow_s:6.1f} ms/sample")
    print(
        f"collate, the tiny processor's:    {1000 * fast_s:6.1f} ms/sample  "
        f"x{slow_s / fast_s:.2f} faster; identical ids and labels: {same}/{len(items)}"
    )
    print(f"train step (forward, backward, AdamW): {1000 * step_s:6.1f} ms/sample")
    slow, fast = slow_s + step_s, fast_s + step_s
    print(
        f"collate + step: {1000 * slow:.0f} -> {1000 * fast:.0f} ms/sample, "
        f"x{slow / fast:.2f} steps per minute"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
