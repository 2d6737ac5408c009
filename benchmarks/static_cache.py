"""Whether the static KV cache speeds up batched greedy decoding of a small model on the CPU.

``BatchedTransformersChat`` asks ``generate`` for a static (preallocated) cache on the CPU. This
decodes the same left-padded batch twice per cache, with the default dynamic cache and with the
static one, every row for exactly ``--new-tokens`` tokens, and prints each time, the ratio and
whether the greedy tokens are identical. Run it alone on the machine.

    python benchmarks/static_cache.py --model data/tiny_base --rows 16 --new-tokens 1000
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="data/tiny_base", help="a checkpoint folder")
    p.add_argument("--rows", type=int, default=16, help="prompts decoded together")
    p.add_argument("--new-tokens", type=int, default=1000, help="tokens generated per row")
    p.add_argument("--repeats", type=int, default=2, help="timed runs per cache (best is kept)")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    args = p.parse_args()

    import torch

    from vsearcher_lite.model.tiny import load_base

    torch.set_num_threads(args.threads)
    model, processor = load_base(args.model)
    model.eval()
    tokenizer = getattr(processor, "tokenizer", processor)
    prompts = [f"Question {i}: which town is twinned with the town of Orsk? " * (1 + i % 4)
               for i in range(args.rows)]
    inputs = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    common = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                  do_sample=False, temperature=None, top_p=None, top_k=None, pad_token_id=pad)

    def decode(cache: str | None) -> tuple[float, torch.Tensor]:
        extra = {"cache_implementation": cache} if cache else {}
        best, out = float("inf"), None
        for _ in range(args.repeats):
            start = time.perf_counter()
            with torch.no_grad():
                out = model.generate(**inputs, **common, **extra)
            best = min(best, time.perf_counter() - start)
        return best, out

    decode(None)  # warm-up
    dynamic_s, dynamic = decode(None)
    static_s, static = decode("static")
    print(f"{args.rows} rows x {args.new_tokens} new tokens, prompt {inputs['input_ids'].shape[1]} "
          f"tokens, {args.threads} torch threads, model {args.model}")
    print(f"dynamic cache {dynamic_s:7.2f} s ({dynamic_s / args.new_tokens * 1000:.1f} ms a step)")
    print(f"static cache  {static_s:7.2f} s ({static_s / args.new_tokens * 1000:.1f} ms a step)")
    print(f"static / dynamic time {static_s / dynamic_s:.2f}; "
          f"identical tokens: {bool(torch.equal(dynamic, static))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
