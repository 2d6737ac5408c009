"""Rollouts: G episodes per task through the project's ReAct loop, as training rows.

A step's episodes generate in lockstep through one batched backend (``chat.batched``); each
finished trajectory is judged, rewarded, flagged and re-rendered into token ids by TRL's
assistant-only collator (what SFT trains on; it gives the policy-token mask). The loop works on
text (any backend, an HTTP server too), so the old log-probabilities come from one forward pass
of the rollout policy over the re-rendered sequence (``update.py``), not from the sampler.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from vsearcher_lite.agent.export import to_trl_record
from vsearcher_lite.agent.loop import EpisodeLimits, Sampling, Trajectory, run_episode
from vsearcher_lite.agent.task import Task
from vsearcher_lite.chat.batched import LockstepBatcher, run_lockstep
from vsearcher_lite.rl.objective import (
    exclusion_reason,
    fatal_step,
    policy_token_mask,
    trajectory_reward,
)
from vsearcher_lite.training.data import make_collator, with_string_parts

SEARCH_TOOLS = ("text_search", "image_search")


@dataclass
class RolloutSettings:
    """How episodes are run and scored (a view of ``GRPOConfig`` that both engines share)."""

    limits: EpisodeLimits
    temperature: float
    top_p: float
    max_tokens: int
    prompt_variant: str
    today: str | None
    seed: int = 0
    search_penalty: float | None = None
    fatal_k: int = 3
    max_prompt_tokens: int | None = None
    max_response_tokens: int | None = None

    def sampling(self, step: int, task_id: str, sample_index: int) -> Sampling:
        """Per-episode sampling, seeded from (seed, step, task, sample) so a run repeats exactly."""
        seed = zlib.crc32(f"{self.seed}:{step}:{task_id}:{sample_index}".encode()) % (2**31 - 1)
        return Sampling(temperature=self.temperature, top_p=self.top_p,
                        max_tokens=self.max_tokens, seed=seed)


@dataclass
class Encoded:
    """A trajectory as the trainer sees it: token ids and the policy-token mask over them."""

    input_ids: list[int]
    policy_mask: list[int]
    prompt_tokens: int  # tokens before the first assistant turn (system prompt, question, image)

    @property
    def response_tokens(self) -> int:
        return len(self.input_ids) - self.prompt_tokens

    @property
    def policy_tokens(self) -> int:
        return int(sum(self.policy_mask))


@dataclass
class RolloutSample:
    """One trajectory of a group, ready for the objective."""

    task_id: str
    group: int
    sample_index: int
    difficulty: str
    trajectory: Trajectory
    correct: bool
    reward: float
    format_failure: bool
    step_errors: list[bool]
    fatal: int | None
    exclusion: str | None
    tool_counts: dict[str, int]
    encoded: Encoded | None
    example: dict = field(repr=False, default_factory=dict)  # messages + image paths
    # filled by the trainer
    advantage: float = 0.0
    loss_mask: list[int] = field(default_factory=list, repr=False)
    in_loss: bool = False
    # per token of encoded.input_ids: the rollout policy's and the reference's (beta > 0)
    old_logp: list[float] | None = field(default=None, repr=False)
    ref_logp: list[float] | None = field(default=None, repr=False)

    @property
    def excluded(self) -> bool:
        return self.exclusion is not None

    def summary(self) -> dict:
        """A flat record for ``rollouts.jsonl``: the outcome, the advantage, and the policy's
        turns as text (no token ids)."""
        enc, traj = self.encoded, self.trajectory
        return {
            "task_id": self.task_id, "group": self.group, "sample_index": self.sample_index,
            "difficulty": self.difficulty, "termination": traj.termination,
            "prediction": traj.prediction, "correct": self.correct, "reward": self.reward,
            "advantage": round(self.advantage, 5), "in_loss": self.in_loss,
            "format_failure": self.format_failure, "fatal": self.fatal,
            "exclusion": self.exclusion, "step_errors": self.step_errors,
            "tool_counts": self.tool_counts, "n_turns": len(traj.turns),
            # what the policy wrote, turn by turn (the tool responses are in the run's cache)
            "turns": [turn.text for turn in traj.turns],
            **{k: getattr(enc, k) if enc else None
               for k in ("prompt_tokens", "response_tokens", "policy_tokens")},
        }


# ---------------------------------------------------------------------------------------------
# Small pure pieces


def step_errors(trajectory: Trajectory) -> list[bool]:
    """Per assistant turn: did it break the format, or did its tool call come back an error?"""
    out = []
    for turn in trajectory.turns:
        bad_format = not (turn.verdict or {}).get("ok", False)
        bad_tool = turn.observation is not None and not turn.observation.get("ok", True)
        out.append(bad_format or bad_tool)
    return out


def format_failed(trajectory: Trajectory) -> bool:
    """The trajectory ended on a turn that failed the strict format check (paper A.3: reward 0)."""
    bad_turn = any(not (t.verdict or {}).get("ok", False) for t in trajectory.turns)
    return trajectory.termination == "format_error" or bad_turn


def first_trained_position(mask: list[int]) -> int:
    """Index of the first policy token (the prompt's length); ``len(mask)`` when there is none.

    >>> first_trained_position([0, 0, 1, 1]), first_trained_position([0, 0])
    (2, 2)
    """
    return next((i for i, m in enumerate(mask) if m), len(mask))


def to_example(trajectory: Trajectory) -> dict:
    """A trajectory as one collator example: list-of-parts messages and the image paths."""
    record = to_trl_record(trajectory)
    return {"messages": with_string_parts(record)["messages"], "images": record["images"]}


def load_example(example: dict) -> dict:
    """The example with its images opened as RGB PIL images (what the collator takes)."""
    from PIL import Image

    images = []
    for path in example["images"]:
        with Image.open(path) as img:
            images.append(img.convert("RGB"))
    return {"messages": example["messages"], "images": images}


class TrajectoryEncoder:
    """Renders trajectories with the chat template and TRL's assistant-only collator."""

    def __init__(self, processor):
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.collator = make_collator(processor)
        self.end_id = int(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))

    def encode(self, example: dict) -> Encoded:
        batch = self.collator([load_example(example)])
        ids = batch["input_ids"][0].tolist()
        labels = batch["labels"][0].tolist()
        mask = policy_token_mask(labels, self.end_id)
        return Encoded(ids, mask, first_trained_position(mask))

    def collate(self, examples: list[dict]) -> dict:
        """A right-padded training batch (ids, attention mask, pixel values, image grid, labels)."""
        return self.collator([load_example(e) for e in examples])


def build_sample(task: Task, trajectory: Trajectory, group: int, sample_index: int, judge,
                 encoder: TrajectoryEncoder | None, settings: RolloutSettings) -> RolloutSample:
    """Judge, reward, encode and flag one finished trajectory."""
    verdict = judge.judge(task.question, task.answer, trajectory.prediction, task.aliases)
    correct = bool(verdict.correct) and trajectory.termination == "answer"
    bad_format = format_failed(trajectory)
    counts = trajectory.tool_counts()
    n_searches = sum(counts.get(t, 0) for t in SEARCH_TOOLS)
    reward = trajectory_reward(correct, not bad_format, n_searches, settings.search_penalty)
    errors = step_errors(trajectory)
    example = to_example(trajectory)
    encoded = encoder.encode(example) if encoder is not None else None
    exclusion = exclusion_reason(trajectory.termination,
                                 encoded.prompt_tokens if encoded else 0,
                                 encoded.response_tokens if encoded else 0,
                                 max_prompt_tokens=settings.max_prompt_tokens,
                                 max_response_tokens=settings.max_response_tokens)
    trajectory.meta.update(answer=task.answer, difficulty=task.difficulty, correct=correct,
                           judge=verdict.to_dict())
    return RolloutSample(
        task_id=task.id, group=group, sample_index=sample_index, difficulty=task.difficulty,
        trajectory=trajectory, correct=correct, reward=reward, format_failure=bad_format,
        step_errors=errors, fatal=fatal_step(errors, settings.fatal_k), exclusion=exclusion,
        tool_counts=counts, encoded=encoded, example=example)


# ---------------------------------------------------------------------------------------------
# Groups of episodes


def rollout_groups(backend, toolbox: Any, tasks: list[Task], generations: int,
                   settings: RolloutSettings, judge, encoder: TrajectoryEncoder | None, *,
                   step: int = 0, first_sample: list[int] | None = None,
                   run: Callable[..., Trajectory] = run_episode) -> list[list[RolloutSample]]:
    """``generations`` episodes of every task, in lockstep when ``backend`` is a
    ``LockstepBatcher`` (else one after another); one list per task. ``first_sample[g]`` numbers
    ``tasks[g]``'s samples from there, so a task listed several times gets distinct seeds.
    """
    offsets = first_sample or [0] * len(tasks)
    jobs = [(g, task, offsets[g] + k) for g, task in enumerate(tasks) for k in range(generations)]

    def run_one(job) -> Trajectory:
        g, task, k = job
        return run(backend, toolbox, task, limits=settings.limits,
                   sampling=settings.sampling(step, task.id, k), today=settings.today,
                   variant=settings.prompt_variant, sample_index=k)

    if isinstance(backend, LockstepBatcher):
        trajectories = run_lockstep(backend, jobs, run_one, keys=[(g, k) for g, _, k in jobs])
    else:
        trajectories = [run_one(job) for job in jobs]
    groups: list[list[RolloutSample]] = [[] for _ in tasks]
    for (g, task, k), traj in zip(jobs, trajectories):
        groups[g].append(build_sample(task, traj, g, k, judge, encoder, settings))
    return groups
