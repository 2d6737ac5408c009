"""What one decode step of the KV-cache engine costs, and what bounds it.

Times a forward pass of one new token per row over a filled cache (the engine's own cache layer
and mask), for rows x cached tokens, and prints milliseconds per step, the keys and values read
per step, and the step's matmul arithmetic. A step at a short context shows the fixed part
(the projections and the model's per-layer overhead); the growth with the context is attention
reading the cache. The last lines time the same step on the main thread and on another one.

    python benchmarks/decode_step.py --model data/reference/sft/checkpoint
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(ROOT / "data/reference/sft/checkpoint"))
    p.add_argument("--rows", default="1,8,16", help="comma-separated batch sizes")
    p.add_argument("--contexts", default="16,900,2000", help="comma-separated cached tokens")
    p.add_argument("--steps", type=int, default=40, help="timed steps per cell")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    args = p.parse_args()

    import vsearcher_lite  # noqa: F401  (first: it sets OpenMP's spin-wait before torch loads)

    # isort: split
    import torch

    from vsearcher_lite.chat.engine import KVEngine, _buffer_cache
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.runtime import set_threads

    set_threads(args.threads)
    model, processor = load_base(args.model)
    model.eval()
    layers = KVEngine(model, processor)._layer_shapes()
    text = model.config.get_text_config(decoder=True)
    params = sum(p.numel() for name, p in model.named_parameters()
                 if "visual" not in name and "embed_tokens" not in name)

    def time_step(rows: int, context: int) -> float:
        keys = [torch.randn(rows, h, context + args.steps + 8, d) for h, d in layers]
        values = [torch.randn_like(k) for k in keys]
        valid = torch.ones(rows, keys[0].shape[2], dtype=torch.bool)
        tokens = torch.randint(20, text.vocab_size - 20, (rows, 1))

        def step(column: int):
            cache = _buffer_cache(keys, values, 0, column)
            positions = torch.full((4, rows, 1), column)
            with torch.no_grad():
                model(input_ids=tokens, attention_mask=valid[:, None, None, :column + 1],
                      position_ids=positions, past_key_values=cache, use_cache=True)

        for i in range(3):
            step(context + i)
        start = time.perf_counter()
        for i in range(args.steps):
            step(context + i)
        return (time.perf_counter() - start) / args.steps

    print(f"model {args.model}: {len(layers)} layers, {params / 1e6:.2f}M parameters outside the "
          f"vision tower and the embeddings; {args.threads} threads")
    print(f"{'rows':>4} {'context':>7} {'ms/step':>8} {'KV MB/step':>10} {'GB/s':>6} "
          f"{'matmul MFLOP':>12}")
    for rows in map(int, args.rows.split(",")):
        for context in map(int, args.contexts.split(",")):
            seconds = time_step(rows, context)
            kv_bytes = rows * context * sum(2 * h * d for h, d in layers) * 4
            print(f"{rows:4d} {context:7d} {seconds * 1e3:8.2f} {kv_bytes / 1e6:10.1f} "
                  f"{kv_bytes / seconds / 1e9:6.1f} {2 * rows * params / 1e6:12.1f}")
    rows, context = 8, 900
    main_thread = time_step(rows, context)
    other: dict[str, float] = {}
    worker = threading.Thread(target=lambda: other.setdefault("s", time_step(rows, context)))
    worker.start()
    worker.join()
    print(f"{rows} rows x {context} tokens: main thread {main_thread * 1e3:.2f} ms, "
          f"another thread {other['s'] * 1e3:.2f} ms (x{other['s'] / main_thread:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
