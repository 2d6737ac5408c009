"""The KV-cache generation engine (``chat.engine``): the same greedy replies as ``generate`` over
whole conversations, on episodes of every level with tool-response images in later turns; seeded
sampling that repeats; caches that follow the weights."""

from pathlib import Path

import pytest
import torch
from agent_fakes import build_sandbox_run, image_tasks, sandbox_toolbox

from vsearcher_lite.agent.loop import EpisodeLimits, Sampling, run_episode
from vsearcher_lite.agent.protocol import STOP_SEQUENCES, initial_messages
from vsearcher_lite.chat import engine as kv
from vsearcher_lite.chat.batched import BatchedTransformersChat, run_lockstep

REFERENCE_SFT = Path(__file__).resolve().parents[1] / "data" / "reference" / "sft" / "checkpoint"
# the cpu profile's evaluation limits ([sft.eval] in profiles/cpu.toml)
LIMITS = EpisodeLimits(max_tool_calls=10, max_context_chars=13_000, wall_clock_s=None)


@pytest.fixture(scope="module")
def sft():
    from vsearcher_lite.model.tiny import load_base

    model, processor = load_base(REFERENCE_SFT)
    return model.eval(), processor


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_sandbox_run(tmp_path_factory.mktemp("engine"))


def episodes(backend, run, tasks, temperature=0.0, seed=5):
    toolbox = sandbox_toolbox(run, top_k=3, style="compact")
    sampling = Sampling(temperature=temperature, top_p=1.0, max_tokens=200, seed=seed)

    def one(task):
        return run_episode(backend, toolbox, task, limits=LIMITS, sampling=sampling,
                           today="2025-09-01", variant="compact")

    return run_lockstep(backend, tasks, one)


def test_greedy_replies_equal_generate_over_whole_conversations_at_every_level(sft, run):
    model, processor = sft
    by_level: dict[str, list] = {}
    for task in image_tasks(run):
        by_level.setdefault(task.difficulty, []).append(task)
    tasks = [t for level in ("easy", "medium", "hard") for t in by_level[level][:2]]
    assert {t.difficulty for t in tasks} == {"easy", "medium", "hard"}
    before = BatchedTransformersChat(model, processor, max_batch=16, engine="generate")
    after = BatchedTransformersChat(model, processor, max_batch=16)
    old, new = episodes(before, run, tasks), episodes(after, run, tasks)
    assert [[t.text for t in e.turns] for e in new] == [[t.text for t in e.turns] for e in old]
    assert [e.termination for e in new] == [e.termination for e in old]
    # what makes the comparison worth having: several turns, images arriving in later turns
    assert sum(len(e.turns) for e in new) >= 2 * len(tasks)
    later_images = [e for e in new for turn in e.turns[:-1]
                    if turn.observation and turn.observation.get("images")]
    assert later_images
    # the same conversations, with most of each prompt read from the caches
    assert after.usage["prompt_tokens"] == before.usage["prompt_tokens"]
    assert after.usage["completion_tokens"] == before.usage["completion_tokens"]
    assert after.usage["prefilled_tokens"] < after.usage["prompt_tokens"] / 2
    assert after.kv.stats.vision_images < sum(1 + len(e.tool_calls) for e in new) * 3


def test_sampled_episodes_repeat_with_their_seeds(sft, run):
    model, processor = sft
    tasks = image_tasks(run)[:2]

    def sample(seed):
        backend = BatchedTransformersChat(model, processor, max_batch=16)
        return [[t.text for t in e.turns]
                for e in episodes(backend, run, tasks, temperature=1.0, seed=seed)]

    first = sample(3)
    assert sample(3) == first
    assert sample(4) != first


def test_a_cache_serves_only_the_weights_it_was_computed_with(sft):
    model, processor = sft
    engine = kv.KVEngine(model, processor)
    conversation = initial_messages("Which river crosses the town?", None, variant="compact",
                                    today="2025-09-01")
    settings = {"max_new_tokens": 4, "end_ids": [], "stop_strings": []}
    first = engine.generate([conversation], ["a"], [None], **settings)[0]
    reply = processor.tokenizer.decode(first.text_tokens, skip_special_tokens=True)
    longer = conversation + [{"role": "assistant", "content": reply},
                             {"role": "user", "content": "<tool_response>\nnothing\n"
                                                         "</tool_response>"}]
    engine.generate([longer], ["a"], [None], **settings)
    assert engine.stats.cached_tokens >= first.prompt_tokens - 1
    cached = engine.stats.cached_tokens
    with torch.no_grad():
        model.lm_head.weight.add_(0.0)  # an in-place change, as an optimizer step makes
    engine.generate([longer], ["a"], [None], **settings)
    assert engine.stats.cached_tokens == cached  # nothing was reused


def test_a_reply_stops_at_the_one_token_stop_and_keeps_its_text(sft):
    model, processor = sft
    conversation = initial_messages("Which town is shown?", None, variant="compact",
                                    today="2025-09-01")
    options = {"temperature": 0.0, "max_tokens": 30, "stop": list(STOP_SEQUENCES)}
    before = BatchedTransformersChat(model, processor, engine="generate")
    after = BatchedTransformersChat(model, processor)
    assert run_lockstep(after, [conversation], lambda c: after.chat(c, **options)) == \
        run_lockstep(before, [conversation], lambda c: before.chat(c, **options))


def test_reply_rules_force_a_token_and_limit_others_in_every_backend(sft):
    """``force_after``: once the reply ends with the trigger, the forced token comes next;
    ``token_limits``: a token used up is never written again. The KV engine, ``generate`` and the
    one-request backend write the same reply."""
    from vsearcher_lite.chat.local import TransformersChat

    model, processor = sft
    tok = processor.tokenizer
    conversation = initial_messages("Which town is shown?", None, variant="compact",
                                    today="2025-09-01")
    plain = BatchedTransformersChat(model, processor)
    first = run_lockstep(plain, [conversation],
                         lambda c: plain.chat(c, temperature=0.0, max_tokens=12))[0]
    trigger = tok.decode(tok(first, add_special_tokens=False)["input_ids"][:1])  # "<think>"
    options = {"temperature": 0.0, "max_tokens": 12, "force_after": [(trigger, "<answer>")]}
    replies = []
    for engine in ("kv", "generate"):
        backend = BatchedTransformersChat(model, processor, engine=engine)
        replies += run_lockstep(backend, [conversation], lambda c: backend.chat(c, **options))
    replies.append(TransformersChat(model, processor=processor).chat(conversation, **options))
    assert replies[0].startswith(trigger + "<answer>") and not first.startswith(
        trigger + "<answer>")
    assert replies[1] == replies[0] and replies[2] == replies[0]
    # the trigger at most once, and "<answer>" never
    limited = {"temperature": 0.0, "max_tokens": 12,
               "token_limits": [(trigger, 1), ("<answer>", 0)]}
    replies = []
    for engine in ("kv", "generate"):
        backend = BatchedTransformersChat(model, processor, engine=engine)
        replies += run_lockstep(backend, [conversation], lambda c: backend.chat(c, **limited))
    ids = tok(replies[0], add_special_tokens=False)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids(trigger)) <= 1 and "<answer>" not in replies[0]
    assert replies[1] == replies[0]
    with pytest.raises(Exception, match="force_after needs single tokens"):
        plain.chat(conversation, temperature=0.0, max_tokens=4,
                   force_after=[("Which town", "<answer>")])


def test_the_reusable_prefix_stops_before_a_changed_or_split_image():
    ids = torch.tensor([1, 2, 9, 9, 9, 3, 4, 5])
    cached = kv._Episode(ids[:7], [(2, 5)], ["cat"], [], [])

    def rendered(fingerprint, tokens=ids):
        return kv._Rendered(tokens, torch.zeros(3, len(tokens)), None, None, [(2, 5)],
                            [fingerprint], 1)

    assert kv.reusable_prefix(cached, rendered("cat")) == 7
    assert kv.reusable_prefix(cached, rendered("dog")) == 2  # another picture, same tokens
    assert kv.reusable_prefix(None, rendered("cat")) == 0
    split = kv._Episode(ids[:4], [(2, 5)], ["cat"], [], [])  # the cache ends inside the image
    assert kv.reusable_prefix(split, rendered("cat")) == 2
    whole = kv._Episode(ids, [(2, 5)], ["cat"], [], [])  # the last token is always computed
    assert kv.reusable_prefix(whole, rendered("cat")) == len(ids) - 1


def test_sampling_draws_from_the_nucleus_only():
    import random

    logits = torch.tensor([[3.0, 2.9, -5.0, -5.0]]).repeat(200, 1)
    draws = [random.Random(i) for i in range(200)]
    picked = kv.next_tokens(logits, 1.0, 0.9, draws)
    assert set(picked.tolist()) == {0, 1}
    assert kv.next_tokens(logits[:1], 1.0, 0.1, [random.Random(0)]).tolist() == [0]
    again = kv.next_tokens(logits, 1.0, 0.9, [random.Random(i) for i in range(200)])
    assert torch.equal(picked, again)


def test_models_the_engine_does_not_know_decode_with_generate(sft):
    model, processor = sft
    assert BatchedTransformersChat(model, processor).engine == "kv"
    attention = model.config._attn_implementation
    model.config._attn_implementation = "flash_attention_2"  # no boolean 4D mask there
    try:
        assert BatchedTransformersChat(model, processor).engine == "generate"
        with pytest.raises(ValueError, match="engine='generate'"):
            BatchedTransformersChat(model, processor, engine="kv")
    finally:
        model.config._attn_implementation = attention
