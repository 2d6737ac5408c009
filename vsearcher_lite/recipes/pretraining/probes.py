"""Probes of the tiny base: exact-match copying on documents of the evaluation world, whose names
were never trained on, and the base model as an agent on held-out sandbox tasks."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from vsearcher_lite.model.tokenizer import PAD_TOKEN, token_id
from vsearcher_lite.recipes.pretraining.corpus import (
    Doc,
    doc_kv,
    doc_lookup,
    doc_page,
    doc_pageqa,
    doc_pick,
    doc_repeat,
    doc_restate,
)
from vsearcher_lite.recipes.pretraining.packing import encode_doc


def doc_lookup_far(world, rng: random.Random) -> Doc:
    """A lookup document after two pages of other text: the copy happens 600-1,200 tokens in,
    where an agent's later tool responses sit."""
    pages = [doc_page(world, rng) for _ in range(2)]
    doc = doc_lookup(world, rng)
    return Doc("lookup", [(p.text, "") for p in pages] + doc.segments, dict(doc.meta, far=True))


def doc_lookup_deep(world, rng: random.Random) -> Doc:
    """A lookup document after ten pages of other text: the copy happens about 2,100 tokens in,
    where the tool responses of a medium or hard episode sit (past the 1,024-token rows of the
    base's first runs)."""
    pages = [doc_page(world, rng) for _ in range(10)]
    doc = doc_lookup(world, rng)
    return Doc("lookup", [(p.text, "") for p in pages] + doc.segments, dict(doc.meta, far=True))


PROBE_KINDS = {"lookup": doc_lookup, "recall": doc_kv, "repeat": doc_repeat, "pick": doc_pick,
               "page_reading": doc_pageqa, "lookup_far": doc_lookup_far,
               "lookup_deep": doc_lookup_deep, "restate": doc_restate}


PROBE_DOC_KIND = {"recall": "kv", "page_reading": "pageqa", "lookup_far": "lookup",
                  "lookup_deep": "lookup"}


def probe_documents(world, kind: str, n: int, seed: int) -> list[Doc]:
    """``n`` probe documents of ``kind`` from ``world`` (the evaluation world)."""
    rng = random.Random(f"vsearcher-probe:{seed}:{kind}")
    writer = PROBE_KINDS[kind]
    docs = []
    while len(docs) < n:
        doc = writer(world, rng)
        if PROBE_DOC_KIND.get(kind, kind) == "lookup" and doc.meta.get("mode") != "fact":
            continue  # the lookup probe copies a fact from a result list
        if doc.kind == PROBE_DOC_KIND.get(kind, kind) and any(role for _, role in doc.segments):
            docs.append(doc)
    return docs


def generated_matches(generated: str, target: str) -> bool:
    """The generation reproduces ``target`` exactly and then stops (end of line or of text).

    >>> [generated_matches(g, "1874") for g in ("1874\\nAnswer", "18745", "187")]
    [True, False, False]
    """
    if not generated.startswith(target):
        return False
    rest = generated[len(target):]
    return rest == "" or rest[0] in "\n"


def greedy_continuations(model, tokenizer, prompts: list[list[int]], max_new_tokens: list[int],
                         batch_size: int) -> list[str]:
    """Greedy continuations of token-id prompts, batched with left padding."""
    import torch

    pad = token_id(tokenizer, PAD_TOKEN)
    out: list[str] = [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths together
    model.eval()
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            width = max(len(prompts[i]) for i in idx)
            fill = [width - len(prompts[i]) for i in idx]
            ids = torch.tensor([[pad] * f + prompts[i] for f, i in zip(fill, idx)],
                               device=model.device)
            mask = torch.tensor([[0] * f + [1] * (width - f) for f in fill], device=model.device)
            new = max(max_new_tokens[i] for i in idx)
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                                 do_sample=False, pad_token_id=pad, eos_token_id=[pad])
            for row, i in enumerate(idx):
                out[i] = tokenizer.decode(gen[row, width:], skip_special_tokens=True)
    return out


def run_copy_probes(model, tokenizer, world, n_per_kind: int, batch_size: int,
                    seed: int = 0) -> dict:
    """Exact-match accuracy on each kind's first copy segment, with examples."""
    results: dict[str, Any] = {}
    for kind in PROBE_KINDS:
        docs = probe_documents(world, kind, n_per_kind, seed)
        prompts, targets, budgets = [], [], []
        for doc in docs:
            first = next(i for i, (_, role) in enumerate(doc.segments) if role)
            targets.append(doc.segments[first][0])
            prompts.append(encode_doc(tokenizer, Doc(doc.kind, doc.segments[:first]))[0])
            target_ids = tokenizer(targets[-1], add_special_tokens=False)["input_ids"]
            budgets.append(len(target_ids) + 2)
        generated = greedy_continuations(model, tokenizer, prompts, budgets, batch_size)
        correct = [generated_matches(g, t) for g, t in zip(generated, targets)]
        results[kind] = {
            "accuracy": round(sum(correct) / max(1, len(correct)), 4),
            "n": len(correct),
            "prompt_tokens": sorted(map(len, prompts))[len(prompts) // 2] if prompts else 0,
            "examples": [{"target": t, "generated": g.split("\n")[0][:120]}
                         for g, t in list(zip(generated, targets))[:3]],
        }
    return results


def run_agent_probe(model, processor, config: Any) -> dict:
    """The base model as an agent on held-out sandbox tasks (near 0: it never saw the protocol),
    through the agent's own loop, toolbox and match judge; ``config`` is a ``PretrainConfig``."""
    n = config.probes.agent_tasks
    if n <= 0:
        return {"measured": False, "reason": "skipped (probes.agent_tasks = 0)"}
    default_dir = Path(config.out_dir).parent / "pretrain-agent-probe"
    run_dir = Path(config.probes.agent_run_dir or default_dir)
    try:
        from vsearcher_lite.agent.judge import MatchJudge
        from vsearcher_lite.agent.loop import EpisodeLimits, Sampling, run_episode
        from vsearcher_lite.agent.task import read_tasks
        from vsearcher_lite.backends.toolbox import make_toolbox
        from vsearcher_lite.chat.local import TransformersChat
        from vsearcher_lite.synthesis.filters import run_filter
        from vsearcher_lite.synthesis.inject import InjectConfig

        heldout = run_dir / "filter" / "heldout.jsonl"
        if not heldout.exists():
            inject = InjectConfig.for_profile("cpu", seed=config.eval_world_seed, progress=False)
            run_filter(run_dir, world="sandbox", inject_config=inject)
        tasks = [t for t in read_tasks(heldout) if t.difficulty in ("easy", "medium")][:n]
        if not tasks:
            return {"measured": False, "reason": f"no easy/medium held-out tasks in {heldout}"}
        toolbox = make_toolbox(run_dir, world="sandbox", top_k=3, observations="compact")
        policy = TransformersChat(model, processor=processor, max_new_tokens=128)
        judge = MatchJudge()
        limits = EpisodeLimits(max_tool_calls=6, wall_clock_s=60.0, max_context_chars=12_000)
        sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=128)
        correct = formatted = calls = 0
        terminations: dict[str, int] = {}
        for task in tasks:
            traj = run_episode(policy, toolbox, task, limits=limits, sampling=sampling,
                               variant="compact")
            verdict = judge.judge(task.question, task.answer, traj.prediction, task.aliases)
            correct += int(bool(verdict.correct))
            formatted += int(all(t.verdict.get("ok") for t in traj.turns) and bool(traj.turns))
            calls += traj.n_tool_calls
            terminations[traj.termination] = terminations.get(traj.termination, 0) + 1
        return {"measured": True, "n_tasks": len(tasks), "accuracy": round(correct / len(tasks), 4),
                "format_valid_rate": round(formatted / len(tasks), 4),
                "mean_tool_calls": round(calls / len(tasks), 3), "terminations": terminations,
                "tasks": str(heldout), "prompt_variant": "compact", "top_k": 3}
    except Exception as exc:  # a probe must never throw away the model trained before it
        first = str(exc).splitlines()[0] if str(exc) else ""
        return {"measured": False, "reason": f"{type(exc).__name__}: {first}"}
