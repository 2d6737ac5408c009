"""Multi-turn GRPO, the rules one by one: reward, advantages, masks, fatal clamp, exclusion, loss,
KL, paired difference; the batched backend; rollouts turned into training rows; an update on the
tiny model (excluded trajectories give exactly zero gradient).

Everything runs on hand-made trajectories (ScriptedChat + fake tools) and the shipped tiny base
with one torch thread, so the file takes seconds.
"""

from __future__ import annotations

import math

import pytest
import torch
from agent_fakes import answer, call, make_images, make_toolbox

from vsearcher_lite.agent.judge import MatchJudge
from vsearcher_lite.agent.loop import EpisodeLimits, run_episode
from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat import ScriptedChat
from vsearcher_lite.chat import batched as batched_chat
from vsearcher_lite.rl import commands, cpu_engine, inputs
from vsearcher_lite.rl import objective as obj
from vsearcher_lite.rl import prescreen as screen
from vsearcher_lite.rl import update as rl_update
from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.rollout import RolloutSettings, TrajectoryEncoder, build_sample
from vsearcher_lite.runio import InputError

torch.set_num_threads(1)


def test_reward_is_correctness_and_a_format_failure_is_zero():
    assert obj.trajectory_reward(True, True) == 1.0
    assert obj.trajectory_reward(False, True) == 0.0
    assert obj.trajectory_reward(True, False) == 0.0  # right answer, broken format: 0 (paper A.3)
    assert obj.trajectory_reward(True, True, n_searches=3, search_penalty=0.9) == 0.9  # MMSearch-R1
    assert obj.trajectory_reward(False, True, n_searches=3, search_penalty=0.9) == 0.0


def test_group_advantages_by_hand():
    # rewards 1, 0, 0, 0: mean 0.25; unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    g = obj.group_advantages([1, 0, 0, 0])
    assert g.mean == 0.25 and g.std == pytest.approx(0.5)
    assert g.advantages[0] == pytest.approx(0.75 / 0.5001) and g.advantages[1] == pytest.approx(
        -0.25 / 0.5001
    )
    assert sum(g.advantages) == pytest.approx(0.0, abs=1e-9) and not g.zero_variance
    unscaled = obj.group_advantages([1, 0, 0, 0], scale=False)
    assert unscaled.advantages == (0.75, -0.25, -0.25, -0.25)
    flat = obj.group_advantages([1, 1, 1])
    assert flat.zero_variance and flat.advantages == (0.0, 0.0, 0.0)


def test_fatal_clamp_and_who_is_in_the_update():
    assert obj.clamp_fatal_advantage(-1.2, fatal=True) == 0.0
    assert obj.clamp_fatal_advantage(0.8, fatal=True) == 0.8
    assert obj.clamp_fatal_advantage(-1.2, fatal=False) == -1.2
    assert obj.final_advantage(-1.2, fatal=3, fatal_aware=True) == 0.0
    assert obj.final_advantage(-1.2, fatal=3, fatal_aware=False) == -1.2
    assert obj.in_update(excluded=False, fatal=None) and obj.in_update(excluded=False, fatal=1)
    assert not obj.in_update(excluded=False, fatal=0)  # fatal at the first step: out of the update
    assert not obj.in_update(excluded=True, fatal=None)


def test_a_fatal_first_step_stays_in_the_baseline():
    # three samples; the third cascaded from its first step (reward 0) and still counts in mean and
    # std
    rewards = [1.0, 0.0, 0.0]
    g = obj.group_advantages(rewards)
    assert g.mean == pytest.approx(1 / 3)
    without = obj.group_advantages(rewards[:2])
    assert g.advantages[0] != pytest.approx(without.advantages[0])


def test_exclusion_reasons():
    assert obj.exclusion_reason("answer") is None
    # the policy's own mistake: trained with reward 0
    assert obj.exclusion_reason("format_error") is None
    for t in ("max_tool_calls", "context_exceeded", "timeout", "policy_error"):
        assert obj.exclusion_reason(t) == t
    assert obj.exclusion_reason("answer", 600, 10, max_prompt_tokens=512) == "prompt_too_long"
    assert (
        obj.exclusion_reason("answer", 100, 2000, max_response_tokens=1536) == "response_too_long"
    )
    assert (
        obj.exclusion_reason("answer", 100, 1536, max_prompt_tokens=512, max_response_tokens=1536)
        is None
    )


# ---------------------------------------------------------------------------------------------
# Masks


def test_fatal_step_is_the_first_of_three_consecutive_errors():
    assert obj.fatal_step([False, True, True, True, True]) == 1
    assert obj.fatal_step([True, True, False, True, True, False]) is None
    assert obj.fatal_step([False, False, True, True, True]) == 2
    assert obj.fatal_step([True, True], k=2) == 0


def test_post_fatal_and_excluded_masks_by_hand():
    #        ctx  t0  t0  ctx t1  ctx  t2 t2
    mask = [0, 1, 1, 0, 1, 0, 1, 1]
    assert obj.turn_of_token(mask) == [-1, 0, 0, -1, 1, -1, 2, 2]
    assert obj.post_fatal_mask(mask, 1) == [0, 1, 1, 0, 0, 0, 0, 0]
    assert obj.post_fatal_mask(mask, 2) == [0, 1, 1, 0, 1, 0, 0, 0]
    assert obj.loss_mask(mask, fatal=1, fatal_aware=True) == [0, 1, 1, 0, 0, 0, 0, 0]
    assert obj.loss_mask(mask, fatal=1, fatal_aware=False) == mask  # the option is off
    assert obj.loss_mask(mask, fatal=0, fatal_aware=True) == [0] * 8
    assert obj.loss_mask(mask, excluded=True) == [0] * 8


@pytest.fixture(scope="module")
def tiny():
    from vsearcher_lite.model.tiny import load_base
    from vsearcher_lite.training.checkpoint import freeze_vision

    model, processor = load_base()
    freeze_vision(model)
    return model, processor


def settings(**kw) -> RolloutSettings:
    kw.setdefault("limits", EpisodeLimits(max_tool_calls=5, wall_clock_s=None))
    return RolloutSettings(
        temperature=0.0,
        top_p=1.0,
        max_tokens=16,
        prompt_variant="compact",
        today="2025-09-01",
        **kw,
    )


def scripted_sample(tmp_path, replies, processor, name="t", **kw):
    q, hits = make_images(tmp_path / name, 2)
    task = Task(
        id=name,
        question="In which year was the town shown in the image founded?",
        answer="1874",
        image_path=q,
        difficulty="easy",
    )
    traj = run_episode(
        ScriptedChat(list(replies)),
        make_toolbox(hits),
        task,
        limits=settings().limits,
        variant="compact",
    )
    return build_sample(
        task, traj, 0, 0, MatchJudge(), TrajectoryEncoder(processor), settings(**kw)
    )


def test_policy_mask_covers_the_assistant_turns_only(tmp_path, tiny):
    _, processor = tiny
    s = scripted_sample(
        tmp_path,
        [
            call("image_search"),
            call("visit", {"url": "https://wiki.sandbox.test/wiki/Tope", "goal": "year"}),
            answer("1874"),
        ],
        processor,
    )
    tok = processor.tokenizer
    ids, mask = s.encoded.input_ids, s.encoded.policy_mask
    runs = [
        tok.decode([t for t, m in zip(ids[a:b], mask[a:b])], skip_special_tokens=False)
        for a, b in spans(mask)
    ]
    assistant = [t.text + "<|im_end|>" for t in s.trajectory.turns]
    assert runs == assistant  # exactly the policy's turns, up to <|im_end|>, nothing else
    masked = tok.decode([t for t, m in zip(ids, mask) if not m], skip_special_tokens=False)
    # tool output is context
    assert "<tool_response>" in masked and "Tope was founded in 1874." in masked
    # images and the system prompt too
    assert "<|image_pad|>" in masked and "You are a search agent" in masked
    assert "<|image_pad|>" not in "".join(runs)
    assert s.reward == 1.0 and s.correct and s.tool_counts == {"image_search": 1, "visit": 1}
    assert s.encoded.prompt_tokens == mask.index(1)


def spans(mask):
    out, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            out.append((start, i))
            start = None
    return out


def test_a_format_error_gets_reward_zero_even_with_the_right_answer(tmp_path, tiny):
    _, processor = tiny
    broken = answer("1874") + " and that is all"  # text after </answer>: the strict check fails
    s = scripted_sample(tmp_path, [call("image_search"), broken], processor)
    assert s.trajectory.termination == "format_error" and s.format_failure
    assert s.reward == 0.0 and not s.correct
    assert s.step_errors == [False, True] and s.exclusion is None  # trained, with reward 0


def test_tool_error_cascade_masks_from_the_fatal_step(tmp_path, tiny):
    _, processor = tiny
    bad_visit = call("visit", {"url": "https://wiki.sandbox.test/wiki/missing", "goal": "year"})
    s = scripted_sample(
        tmp_path, [call("image_search"), bad_visit, bad_visit, bad_visit, answer("1874")], processor
    )
    assert s.step_errors == [False, True, True, True, False] and s.fatal == 1
    mask = obj.loss_mask(s.encoded.policy_mask, fatal=s.fatal, fatal_aware=True)
    turns = obj.turn_of_token(s.encoded.policy_mask)
    assert all(m == 0 for m, t in zip(mask, turns) if t >= 1)
    assert all(m == 1 for m, t in zip(mask, turns) if t == 0)


def test_limit_hits_are_excluded_from_the_loss(tmp_path, tiny):
    _, processor = tiny
    many = [call("text_search", {"query": f"q{i}"}) for i in range(7)]
    s = scripted_sample(tmp_path, many, processor)  # the limit is 5 calls: the 6th request ends it
    assert (
        s.trajectory.termination == "max_tool_calls"
        and s.exclusion == "max_tool_calls"
        and s.excluded
    )
    long = scripted_sample(
        tmp_path,
        [call("image_search"), answer("1874")],
        processor,
        name="long",
        max_response_tokens=10,
    )
    # still rewarded: it counts in the baseline
    assert long.exclusion == "response_too_long" and long.reward == 1.0


# ---------------------------------------------------------------------------------------------
# The loss, on hand-computed numbers


def test_clipped_loss_by_hand():
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0]]))
    old = torch.zeros(1, 3)
    pos, clipped = obj.clipped_token_loss(logp, old, torch.tensor([1.0]))
    assert pos.tolist()[0] == pytest.approx([-1.2, -0.5, -1.0])  # r=1.5 clipped at 1.2; r=0.5 kept
    assert clipped.tolist() == [[True, False, False]]
    neg, clipped = obj.clipped_token_loss(logp, old, torch.tensor([-1.0]))
    # pessimistic side: r=1.5 kept, r=0.5 clipped at 0.8
    assert neg.tolist()[0] == pytest.approx([1.5, 0.8, 1.0])
    assert clipped.tolist() == [[False, True, False]]
    asym, _ = obj.clipped_token_loss(logp, old, torch.tensor([1.0]), clip_low=0.2, clip_high=0.28)
    assert asym.tolist()[0][0] == pytest.approx(-1.28)


def test_k3_kl_and_aggregation_by_hand():
    logp = torch.tensor([[math.log(0.5), math.log(0.25)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.5)]])
    kl = obj.k3_kl(logp, ref)
    # q = ref - logp: -ln 2 and +ln 2 -> e^q - q - 1
    assert kl.tolist()[0] == pytest.approx([0.5 + math.log(2) - 1, 2 - math.log(2) - 1])
    assert (obj.k3_kl(logp, logp) == 0).all()
    x = torch.tensor([[1.0, 2.0, 3.0], [10.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert obj.aggregate(x, m, "token").item() == pytest.approx(16 / 4)
    assert obj.aggregate(x, m, "sequence").item() == pytest.approx((2 + 10) / 2)
    # a micro-batch of a larger step
    assert obj.aggregate(x, m, "token", n_tokens=8).item() == pytest.approx(16 / 8)


def test_grpo_loss_by_hand():
    logp = torch.log(torch.tensor([[1.0, 1.0], [1.0, 1.0]]))  # ratio 1 everywhere (on-policy)
    old = torch.zeros(2, 2)
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, stats = obj.grpo_loss(logp, old, torch.tensor([1.0, -2.0]), mask)
    assert loss.item() == pytest.approx((-1 - 1 + 2) / 3)
    assert stats["tokens"] == 3 and stats["clip_fraction"] == 0.0 and stats["kl"] is None
    ref = torch.full((2, 2), math.log(0.5))
    loss_kl, stats = obj.grpo_loss(
        logp, old, torch.tensor([1.0, -2.0]), mask, ref_logp=ref, beta=0.1
    )
    k3 = 0.5 + math.log(2) - 1  # q = ln 0.5
    assert loss_kl.item() == pytest.approx(loss.item() + 0.1 * k3)
    assert stats["kl"] == pytest.approx(k3)


def test_paired_difference_by_hand():
    d = obj.paired_difference([1, 1, 0, 0, 1, 0], [1, 0, 1, 1, 1, 0])
    # differences 0, -1, 1, 1, 0, 0: mean 1/6; sample var (sum (d - 1/6)^2) / 5
    var = sum((x - 1 / 6) ** 2 for x in [0, -1, 1, 1, 0, 0]) / 5
    assert d.mean == pytest.approx(1 / 6) and d.se == pytest.approx(math.sqrt(var / 6))
    assert (d.n, d.gained, d.lost) == (6, 2, 1)
    same = obj.paired_difference([1, 0, 1], [1, 0, 1])
    assert same.mean == 0 and same.se == 0 and same.gained == same.lost == 0
    with pytest.raises(ValueError):
        obj.paired_difference([1], [1, 0])


# ---------------------------------------------------------------------------------------------
# An update on the tiny model


def two_samples(tmp_path, processor):
    good = scripted_sample(tmp_path, [call("image_search"), answer("1874")], processor, name="good")
    bad = scripted_sample(tmp_path, [call("image_search"), answer("1900")], processor, name="bad")
    return good, bad


def grads(model):
    return {
        n: (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
        for n, p in model.named_parameters()
        if p.requires_grad
    }


def loss_and_grads(model, processor, samples):
    enc = TrajectoryEncoder(processor)
    batch = enc.collate([s.example for s in samples])
    length = batch["input_ids"].shape[1]
    mask = rl_update.padded_masks(samples, length)
    model.zero_grad(set_to_none=True)
    logp, _ = rl_update.token_logps(model, batch, mask)
    loss, _ = obj.grpo_loss(logp, logp.detach(), torch.tensor([s.advantage for s in samples]), mask)
    loss.backward()
    return loss.item(), grads(model)


def test_excluded_trajectories_contribute_exactly_zero_gradient(tmp_path, tiny):
    model, processor = tiny
    good, bad = two_samples(tmp_path, processor)
    cfg = GRPOConfig.for_profile("cpu")
    bad.exclusion = "timeout"  # as if it had timed out: in the baseline, not in the loss
    rl_update.assign_advantages([[good, bad]], cfg)
    assert good.advantage > 0 > bad.advantage  # the excluded one still shaped the baseline
    assert good.in_loss and not bad.in_loss and not any(bad.loss_mask)
    # alone, the excluded trajectory gives a zero loss and a zero gradient, whatever its advantage
    bad.advantage = 50.0
    loss, g = loss_and_grads(model, processor, [bad])
    assert loss == 0.0 and all((v == 0).all() for v in g.values())
    # next to a trained one, changing its advantage changes nothing
    _, g1 = loss_and_grads(model, processor, [good, bad])
    bad.advantage = -50.0
    _, g2 = loss_and_grads(model, processor, [good, bad])
    assert any((v != 0).any() for v in g1.values())
    assert all(torch.equal(g1[n], g2[n]) for n in g1)
    model.zero_grad(set_to_none=True)


def test_zero_variance_groups_are_dropped_and_an_update_moves_the_policy(tmp_path, tiny):
    import copy

    model, processor = tiny
    model = copy.deepcopy(model)
    good, bad = two_samples(tmp_path, processor)
    other_a, other_b = two_samples(tmp_path / "o", processor)
    other_b.reward = 1.0  # a group whose rewards are all 1: no signal
    cfg = GRPOConfig.for_profile("cpu", mu=2, learning_rate=1e-4, beta=0.02, micro_batch_size=2)
    stats = rl_update.assign_advantages([[good, bad], [other_a, other_b]], cfg)
    assert stats == {"zero_variance_groups": 1, "groups": 2}
    assert not other_a.in_loss and not other_b.in_loss and good.in_loss and bad.in_loss
    enc = TrajectoryEncoder(processor)
    ref = copy.deepcopy(model).eval()
    samples = [good, bad, other_a, other_b]
    score = rl_update.score_samples(model, samples, enc, cfg, ref_model=ref)
    assert score["entropy"] > 0
    # the reference is scored for trained rows only
    assert good.ref_logp is not None and other_a.ref_logp is None
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    def margin():  # log p(rewarded trajectory) - log p(unrewarded one), over their trained tokens
        return sum(lp for lp, m in zip(good.old_logp, good.loss_mask) if m) - sum(
            lp for lp, m in zip(bad.old_logp, bad.loss_mask) if m
        )

    margin_before = margin()
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=cfg.learning_rate
    )
    update = rl_update.update_policy(model, opt, samples, enc, cfg)
    assert update["trained_tokens"] == sum(good.loss_mask) + sum(bad.loss_mask)
    assert update["kl"] == pytest.approx(0.0, abs=1e-6)  # the first update starts at the reference
    assert 0 <= update["clip_fraction"] <= 1 and update["grad_norm"] > 0
    assert any(
        not torch.equal(before[n], p) for n, p in model.named_parameters() if p.requires_grad
    )
    rl_update.score_samples(model, [good, bad], enc, cfg)
    assert margin() > margin_before  # the rewarded trajectory gained on the unrewarded one


def test_log_probs_and_entropy_are_those_of_the_sampling_temperature(tmp_path, tiny):
    model, processor = tiny
    good, bad = two_samples(tmp_path, processor)
    enc = TrajectoryEncoder(processor)
    batch = enc.collate([good.example])
    mask = rl_update.padded_masks([good], batch["input_ids"].shape[1], "policy_mask")
    with torch.no_grad():
        logits = model(**{k: batch[k] for k in ("input_ids", "attention_mask", "pixel_values",
                                                "image_grid_thw", "mm_token_type_ids")
                          if k in batch}).logits[0].float()
        at_one, _ = rl_update.token_logps(model, batch, mask)
        at_two, ent_two = rl_update.token_logps(model, batch, mask, temperature=2.0,
                                                with_entropy=True)
    t = int(mask[0].nonzero()[0])  # the first policy token, predicted from position t - 1
    token = int(batch["input_ids"][0, t])
    by_hand = torch.log_softmax(logits[t - 1] / 2.0, dim=-1)
    assert at_two[0, t].item() == pytest.approx(by_hand[token].item(), abs=1e-5)
    assert at_one[0, t].item() == pytest.approx(
        torch.log_softmax(logits[t - 1], dim=-1)[token].item(), abs=1e-5)
    assert ent_two[0, t].item() == pytest.approx(-(by_hand.exp() * by_hand).sum().item(), abs=1e-5)
    # scoring a step takes the config's temperature, so old and new log-probs compare like for like
    cfg = GRPOConfig.for_profile("cpu", temperature=2.0, micro_batch_size=2)
    score = rl_update.score_samples(model, [good], enc, cfg)
    assert good.old_logp[t] == pytest.approx(at_two[0, t].item(), abs=1e-5)
    hot = score["entropy"]
    rl_update.score_samples(model, [good], enc, GRPOConfig.for_profile("cpu", temperature=1.0))
    assert good.old_logp[t] == pytest.approx(at_one[0, t].item(), abs=1e-5)
    assert hot > rl_update.score_samples(
        model, [good], enc, GRPOConfig.for_profile("cpu", temperature=1.0))["entropy"]


# ---------------------------------------------------------------------------------------------
# The batched backend


def test_batched_greedy_matches_one_by_one_and_lockstep_sampling_repeats(tmp_path, tiny):
    from vsearcher_lite.agent.protocol import STOP_SEQUENCES, initial_messages
    from vsearcher_lite.chat.local import TransformersChat

    model, processor = tiny
    q, _ = make_images(tmp_path, 0)
    convs = [
        initial_messages(
            f"Question number {i}: which town is shown?",
            q if i % 2 else None,
            variant="compact",
            today="2025-09-01",
        )
        for i in range(3)
    ]
    single = TransformersChat(model, processor=processor)
    options = {"temperature": 0.0, "max_tokens": 12, "stop": list(STOP_SEQUENCES)}
    expected = [single.chat(c, **options) for c in convs]
    batched = batched_chat.BatchedTransformersChat(model, processor, max_batch=8)
    got = batched_chat.run_lockstep(batched, convs, lambda c: batched.chat(c, **options))
    assert got == expected
    assert batched.stats.calls == 1 and batched.stats.rows == 3  # one generate call for all three

    sampled = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 12, "seed": 7}

    def sample_once():
        backend = batched_chat.BatchedTransformersChat(model, processor)
        return batched_chat.run_lockstep(backend, convs, lambda c: backend.chat(c, **sampled))

    first, again = sample_once(), sample_once()
    assert first == again and len(first) == 3  # lockstep: same batches, same seed, same samples


def test_unbatched_mode_flushes_on_its_own(tiny):
    import threading

    from vsearcher_lite.chat import ChatError

    model, processor = tiny
    backend = batched_chat.BatchedTransformersChat(model, processor, max_batch=4, max_wait_s=0.01)
    out = {}

    def ask(i):
        out[i] = backend.chat(
            [{"role": "user", "content": f"hello {i}"}], temperature=0.0, max_tokens=4
        )

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(out) == [0, 1, 2] and backend.stats.rows == 3
    with pytest.raises(ChatError, match="presence_penalty"):
        backend.chat([{"role": "user", "content": "x"}], presence_penalty=1.0)


# ---------------------------------------------------------------------------------------------
# Settings, sampling of tasks, CLI


def test_presets_and_checks():
    cpu = GRPOConfig.for_profile("cpu")
    assert (
        cpu.engine == "cpu"
        and cpu.method == "full"
        and cpu.threads == 2
        and cpu.minutes is not None
    )
    assert cpu.difficulty_mix == {"onehop": 2, "easy": 2, "medium": 1} and (
        cpu.prompts_per_step,
        cpu.generations,
    ) == (1, 8)
    single = GRPOConfig.for_profile("single_gpu")
    multi = GRPOConfig.for_profile("multi_gpu")
    for c in (single, multi):  # paper A.4
        assert (c.engine, c.prompts_per_step, c.generations, c.learning_rate) == (
            "trl",
            32,
            8,
            2e-6,
        )
        assert (c.temperature, c.top_p, c.max_tool_calls, c.beta) == (0.6, 0.9, 30, 0.0)
        assert (c.max_prompt_tokens, c.max_response_tokens) == (2048, 28_672)
        assert c.difficulty_mix == {"easy": 4, "medium": 3, "hard": 3}
    assert single.method == "lora" and multi.method == "full" and multi.use_vllm
    # a cpu-engine option
    assert cpu.dynamic_sampling and not single.dynamic_sampling and not multi.dynamic_sampling
    assert cpu.task_source == single.task_source == multi.task_source == "rl"
    with pytest.raises(ValueError, match="task_source"):
        GRPOConfig.for_profile("cpu", task_source="heldout")
    with pytest.raises(ValueError, match="max_draw_rounds"):
        GRPOConfig.for_profile("cpu", max_draw_rounds=0)
    with pytest.raises(ValueError, match="generations"):
        GRPOConfig.for_profile("cpu", generations=1)
    with pytest.raises(ValueError, match="LoRA"):
        GRPOConfig.for_profile("cpu", method="lora")
    with pytest.raises(TypeError, match="unknown GRPO setting"):
        GRPOConfig.for_profile("cpu", bogus=1)


def test_task_sampler_draws_each_difficulty_its_share_in_passes():
    tasks = [Task(id=f"e{i}", question="q", answer="a", difficulty="easy") for i in range(4)] + [
        Task(id=f"m{i}", question="q", answer="a", difficulty="medium") for i in range(4)
    ]
    s = inputs.TaskSampler(tasks, {"easy": 1, "medium": 1}, seed=0)
    drawn = [t.id for _ in range(4) for t in s.draw(2)]
    # one pass over each pool
    assert sorted(d for d in drawn if d[0] == "e") == [
        "e0",
        "e1",
        "e2",
        "e3",
    ]


def test_cli_options_become_the_config(tmp_path):
    from vsearcher_lite.cli import build_parser

    args = build_parser().parse_args(
        [
            "grpo",
            "--run-dir",
            str(tmp_path),
            "--steps",
            "3",
            "--fatal-aware",
            "--search-penalty",
            "--mix",
            "easy:4,medium:3",
            "--beta",
            "0",
        ]
    )
    cfg = commands.config_from_args(args)
    assert cfg.max_steps == 3 and cfg.fatal_aware and cfg.search_penalty == 0.9 and cfg.beta == 0.0
    assert cfg.difficulty_mix == {"easy": 4.0, "medium": 3.0}
    # the cpu preset's
    assert cfg.task_source == "rl" and cfg.dynamic_sampling and cfg.max_draw_rounds == 2
    args = build_parser().parse_args(
        [
            "grpo",
            "--run-dir",
            str(tmp_path),
            "--task-source",
            "sft",
            "--no-dynamic-sampling",
            "--max-draw-rounds",
            "3",
            "--curriculum",
            "prescreen",
            "--prescreen-samples",
            "3",
        ]
    )
    cfg = commands.config_from_args(args)
    assert cfg.task_source == "sft" and not cfg.dynamic_sampling and cfg.max_draw_rounds == 3
    assert cfg.curriculum == "prescreen" and cfg.prescreen_samples == 3
    with pytest.raises(InputError):
        commands.parse_mix("easy:four")


def write_tasks(path, ids):
    from vsearcher_lite.runio import write_jsonl

    write_jsonl(
        path, [Task(id=i, question="q", answer="a", difficulty="onehop").to_dict() for i in ids]
    )


def test_grpo_trains_on_the_rl_pool_unless_told_to_use_sft_tasks(tmp_path):
    (tmp_path / "filter").mkdir()
    with pytest.raises(
        InputError, match="no RL task pool.*vsearcher-lite filter.*--task-source sft"
    ):
        inputs.train_tasks(tmp_path, GRPOConfig.for_profile("cpu"))
    write_tasks(tmp_path / "filter" / "rl_tasks.jsonl", ["r1", "r2"])
    write_tasks(tmp_path / "filter" / "train.jsonl", ["s1", "s2", "s3"])
    write_tasks(tmp_path / "other.jsonl", ["o1"])
    ids = lambda config: [t.id for t in inputs.train_tasks(tmp_path, config)]  # noqa: E731
    assert ids(GRPOConfig.for_profile("cpu")) == ["r1", "r2"]
    assert ids(GRPOConfig.for_profile("cpu", task_source="sft")) == ["s1", "s2", "s3"]
    with_file = GRPOConfig.for_profile(
        "cpu", task_source="sft", train_file=str(tmp_path / "other.jsonl")
    )
    assert [t.id for t in inputs.train_tasks(tmp_path, with_file)] == ["o1"]


def test_a_pool_that_sft_trained_on_is_reported(tmp_path):
    (tmp_path / "filter").mkdir()
    write_tasks(tmp_path / "filter" / "rl_tasks.jsonl", ["r1", "r2"])
    cfg = GRPOConfig.for_profile("cpu")
    pool = inputs.train_tasks(tmp_path, cfg)
    lines = []
    # no SFT data yet
    assert inputs.check_pool_unseen(tmp_path, pool, cfg, lines.append) is None and lines == []
    (tmp_path / "trajectories").mkdir()
    (tmp_path / "trajectories" / "accepted.jsonl").write_text('{"task_id": "s1"}\n')
    assert inputs.check_pool_unseen(tmp_path, pool, cfg, lines.append) == 0 and lines == []
    # a run folder whose SFT data was made from the training split before the pool was carved out of
    # it
    (tmp_path / "trajectories" / "accepted.jsonl").write_text(
        '{"task_id": "s1"}\n{"task_id": "r2"}\n{"task_id": "r2"}\n'
    )
    assert inputs.check_pool_unseen(tmp_path, pool, cfg, lines.append) == 1
    assert len(lines) == 1 and "1 of the 2 RL-pool tasks" in lines[0]
    assert (
        inputs.check_pool_unseen(
            tmp_path, pool, GRPOConfig.for_profile("cpu", task_source="sft"), lines.append
        )
        is None
    )


# ---------------------------------------------------------------------------------------------
# Dynamic sampling and the pre-screen


class ScriptedSampler:
    """Hands out tasks in a fixed order."""

    def __init__(self, ids, difficulty="onehop"):
        self.queue = [Task(id=i, question="q", answer="a", difficulty=difficulty) for i in ids]

    def draw(self, n):
        out, self.queue = self.queue[:n], self.queue[n:]
        return out


REWARDS = {"mix": [1.0, 0.0, 0.0, 1.0], "zero": [0.0] * 4, "one": [1.0] * 4}


def fake_rollout(calls):
    """Groups whose rewards follow the task id's prefix (mix / zero / one); each call is
    recorded."""
    from types import SimpleNamespace

    def rollout(tasks, draw_round):
        calls.append((draw_round, [t.id for t in tasks]))
        return [
            [SimpleNamespace(task_id=t.id, difficulty=t.difficulty, reward=r, correct=r > 0,
                             format_failure=False)
             for r in REWARDS[t.id.split("-")[0]]]
            for t in tasks
        ]

    return rollout


def test_dynamic_sampling_redraws_until_the_batch_has_signal():
    order = ["mix-a", "zero-a", "one-a", "mix-b", "one-b", "mix-c", "mix-d", "mix-e", "mix-f"]
    sampler, calls = ScriptedSampler(order, difficulty="medium"), []
    cfg = GRPOConfig.for_profile("cpu", prompts_per_step=4, max_draw_rounds=4)
    batch, drawn, stats = cpu_engine.draw_groups(sampler, fake_rollout(calls), cfg)
    assert [r for r, _ in calls] == [0, 1]  # the second round filled the batch: no third
    assert [g[0].task_id for g in batch] == ["mix-a", "mix-b", "mix-c", "mix-d"]
    assert stats == {
        "groups": 8,
        "zero_variance_groups": 3,
        "groups_kept": 4,
        "groups_surplus": 1,
        "draw_rounds": 2,
        "zero_variance_share": 0.375,
        # every group with signal, the surplus one too, by level
        "mixed_easy": 0,
        "mixed_medium": 5,
        "mixed_hard": 0,
    }
    # every drawn group is in the samples drawn (what rollouts.jsonl logs)
    assert len(drawn) == 8 * 4 and [s.task_id for s in drawn[::4]] == order[:8]


def test_dynamic_sampling_stops_at_the_round_cap():
    sampler, calls = ScriptedSampler([f"zero-{i}" for i in range(9)] + ["mix-z"]), []
    cfg = GRPOConfig.for_profile("cpu", prompts_per_step=3, max_draw_rounds=2)
    batch, drawn, stats = cpu_engine.draw_groups(sampler, fake_rollout(calls), cfg)
    assert batch == [] and len(calls) == 2 and len(drawn) == 6 * 4
    assert stats == {
        "groups": 6,
        "zero_variance_groups": 6,
        "groups_kept": 0,
        "groups_surplus": 0,
        "draw_rounds": 2,
        "zero_variance_share": 1.0,
        "mixed_easy": 0,
        "mixed_medium": 0,
        "mixed_hard": 0,
    }


def test_without_dynamic_sampling_one_round_is_the_batch():
    sampler, calls = ScriptedSampler(["mix-a", "zero-a", "one-a", "mix-b", "mix-c"]), []
    cfg = GRPOConfig.for_profile("cpu", prompts_per_step=4, dynamic_sampling=False)
    batch, drawn, stats = cpu_engine.draw_groups(sampler, fake_rollout(calls), cfg)
    assert len(calls) == 1 and [g[0].task_id for g in batch] == [
        "mix-a",
        "zero-a",
        "one-a",
        "mix-b",
    ]
    assert stats == {
        "groups": 4,
        "zero_variance_groups": 2,
        "groups_kept": 2,
        "groups_surplus": 0,
        "draw_rounds": 1,
        "zero_variance_share": 0.5,
        "mixed_easy": 0,  # one-hop groups are not counted by level
        "mixed_medium": 0,
        "mixed_hard": 0,
    }


def test_prescreen_counts_correct_samples_and_keeps_the_mixed_tasks(tmp_path, capsys):
    q, hits = make_images(tmp_path, 2)
    tasks = [
        Task(
            id=i,
            question="In which year was the town shown in the image founded?",
            answer="1874",
            image_path=q,
            difficulty=d,
        )
        for i, d in (("always", "easy"), ("sometimes", "easy"), ("never", "medium"))
    ]
    # episodes run one after another on a plain backend: 2 per task, in task order
    replies = [
        answer("1874"),
        answer("1874"),
        answer("1874"),
        answer("1900"),
        answer("1900"),
        answer("1911"),
    ]
    got = screen.prescreen(
        ScriptedChat(replies),
        make_toolbox(hits),
        tasks,
        2,
        settings(),
        MatchJudge(),
        tasks_per_call=2,
        progress=True,
    )
    assert got == {"always": 2, "sometimes": 1, "never": 0}
    assert "pre-screen:   0%|          | 0/3" in capsys.readouterr().err  # a bar over the tasks
    mixed = screen.mixed_tasks(got, 2)
    assert mixed == {"sometimes"}
    # easy keeps its mixed task only; medium has none, so it keeps all its tasks
    assert [t.id for t in screen.prescreened_tasks(tasks, mixed)] == ["sometimes", "never"]


def test_the_prescreen_samples_the_whole_pool_or_a_draw_by_the_mix():
    from types import SimpleNamespace as T

    tasks = [T(id=f"{d}{i}", difficulty=d) for d in ("easy", "medium", "hard") for i in range(6)]
    config = GRPOConfig.for_profile("cpu", curriculum="prescreen",
                                    difficulty_mix={"easy": 4, "medium": 3, "hard": 3})
    config.prescreen_tasks = None  # the reference's setting: every task of the pool
    assert screen.prescreen_candidates(tasks, config) == tasks
    config.check()
    config.prescreen_tasks = 10
    drawn = screen.prescreen_candidates(tasks, config)
    assert [t.difficulty for t in drawn].count("easy") == 4 and len({t.id for t in drawn}) == 10
    config.prescreen_tasks = 0
    with pytest.raises(ValueError, match="prescreen_tasks at least 1"):
        config.check()


def test_a_missing_sft_checkpoint_says_what_to_run(tmp_path):
    with pytest.raises(InputError, match="vsearcher-lite sft"):
        inputs.resolve_init(tmp_path, GRPOConfig.for_profile("cpu"))
    with pytest.raises(InputError, match="--init"):
        inputs.resolve_init(tmp_path, GRPOConfig.for_profile("cpu", init=str(tmp_path / "nowhere")))
