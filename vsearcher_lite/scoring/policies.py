"""The policy-spec mini-language of the evaluation: a spec string -> a ``Policy`` the runner runs.

Specs (``make_policy``):

- ``teacher`` (or ``heuristic``): the sandbox's heuristic teacher, one per task;
- ``base``: the shipped tiny base model (``data/tiny_base``) as a local transformers policy;
- a chat spec for ``make_chat``: ``openai:<model>@<base_url>``, ``transformers:<path or hub id>``,
  or just the path of a saved checkpoint folder;
- ``direct`` / ``direct:<spec>``: the no-tools ablation of a policy (default: the base model): a
  system prompt without tools, and an episode that allows no tool call.

The runner, the comparison and the GRPO stage share this one reading of a spec. ``config``
arguments are ``EvalConfig`` objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.protocol import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    SANDBOX_TODAY,
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    resolve_today,
)
from vsearcher_lite.agent.task import Task
from vsearcher_lite.agent.teacher import HeuristicTeacher
from vsearcher_lite.backends.chat import make_chat
from vsearcher_lite.chat import ChatBackend, usage_of
from vsearcher_lite.chat.base import ChatError
from vsearcher_lite.chat.batched import BatchedTransformersChat, LockstepBatcher
from vsearcher_lite.chat.local import TransformersChat
from vsearcher_lite.runio import InputError
from vsearcher_lite.runtime import resolve_device

DIRECT_PROMPT_FULL = (
    "You answer questions about an image and the world from what you already know. In this setting "
    "you have no tools: you cannot search or open pages, so do not ask for them.\n"
    f"Reply with your short reasoning inside {THINK_OPEN}{THINK_CLOSE}, then your final answer "
    f"inside {ANSWER_OPEN}{ANSWER_CLOSE}: only the answer itself, a name, a number or a short "
    "phrase. If you are unsure, give your best guess.\n"
    "Today's date: {today}"
)


DIRECT_PROMPT_COMPACT = (
    f"You are a search agent without tools. Reply with {THINK_OPEN}...{THINK_CLOSE} then "
    f"{ANSWER_OPEN}...{ANSWER_CLOSE}. Date: {{today}}"
)


def direct_system_prompt(today: str | None, variant: str = "full") -> str:
    """The no-tools ablation's system prompt (the tools and their workflow left out)."""
    template = DIRECT_PROMPT_COMPACT if variant == "compact" else DIRECT_PROMPT_FULL
    return template.replace("{today}", resolve_today(today))


#: The no-tools ablation's decoding rules for a local model trained on the protocol, which never
#: learned to answer without searching first: once its reasoning closes the answer opens, it
#: writes no tool call, and each tag of the reply comes once.
FORCE_ANSWER = ((THINK_CLOSE, ANSWER_OPEN),)
ANSWER_ONLY = ((TOOL_CALL_OPEN, 0), (TOOL_CALL_CLOSE, 0), (THINK_OPEN, 1), (THINK_CLOSE, 1),
               (ANSWER_OPEN, 1))


def close_answer(reply: str) -> str:
    """A forced answer ends at its first line break (or its close tag), and is closed there.

    >>> close_answer("<think>x</think><answer>Paris\\nQ: and what</think><answer>y")
    '<think>x</think><answer>Paris</answer>'
    >>> close_answer("<think>x</think><answer>Rome</answer>"), close_answer("<think>x")
    ('<think>x</think><answer>Rome</answer>', '<think>x')
    """
    head, opened, rest = reply.partition(ANSWER_OPEN)
    if not opened:
        return reply
    answer = rest.split(ANSWER_CLOSE, 1)[0].strip().split("\n", 1)[0].strip()
    return f"{head}{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"


class DirectAnswerPolicy(ChatBackend):
    """The no-tools ablation of a policy: its system message is replaced by a prompt without tools
    (and its episode allows no tool call: ``EvalConfig.limits(tools=False)``). With
    ``force_answer`` (a local model trained on the protocol) the answer opens as soon as the
    reasoning closes and ends at its first line break: the row then measures what the model
    answers from its own knowledge, not whether it can write a reply it never saw in training."""

    def __init__(self, inner: ChatBackend, *, today: str | None = SANDBOX_TODAY,
                 variant: str = "full", force_answer: bool = False):
        self.inner = inner
        self.system = direct_system_prompt(today, variant)
        self.force_answer = force_answer
        self.name = f"direct({getattr(inner, 'name', type(inner).__name__)})"

    @property
    def usage(self) -> dict:
        return usage_of(self.inner)

    def chat(self, messages: list[dict], **sampling: Any) -> str:
        rest = [m for m in messages if m.get("role") != "system"]
        if self.force_answer:
            sampling = {**sampling, "force_after": FORCE_ANSWER, "token_limits": ANSWER_ONLY}
        reply = self.inner.chat([{"role": "system", "content": self.system}, *rest], **sampling)
        return close_answer(reply) if self.force_answer else reply


def forces_answers(backend: ChatBackend) -> bool:
    """Whether the no-tools ablation forces ``backend``'s answers: a local model whose tokenizer
    has the protocol's tags as single tokens (the tiny model, trained on the protocol; a hub
    model such as Qwen3-VL follows the no-tools prompt as it is)."""
    from vsearcher_lite.chat.local import force_after_ids, token_limit_ids

    tokenizer = getattr(backend, "tokenizer", None)
    if not isinstance(backend, (BatchedTransformersChat, TransformersChat)) or tokenizer is None:
        return False
    try:
        force_after_ids(tokenizer, FORCE_ANSWER)
        token_limit_ids(tokenizer, ANSWER_ONLY)
    except ChatError:
        return False
    return True


@dataclass
class Policy:
    """What ``evaluate`` runs: a name for tables, the spec it came from, and a backend per task."""

    name: str
    spec: str
    for_task: Callable[[Task], ChatBackend] = field(repr=False)
    tools: bool = True  # False: the direct-answer ablation
    # the one backend, when one serves every task
    shared: ChatBackend | None = field(default=None, repr=False)
    # > 1: the backend generates this many episodes' turns at once (run that many threads)
    batch: int = 1
    # acts on the run's seed beyond sampling (the heuristic teacher's mistakes)
    uses_seed: bool = False


GENERIC_CHECKPOINT_NAMES = {"model", "final", "checkpoint", "out", "output", "best", "latest",
                            "merged"}


def slug(text: str) -> str:
    """A file-name-safe label: ``"Qwen/Qwen3-VL 8B"`` -> ``"qwen-qwen3-vl-8b"``."""
    out = "".join(c if c.isalnum() or c in "._" else "-" for c in text.strip().lower())
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-._") or "policy"


def policy_label(spec: str) -> str:
    """A short name for a policy spec, for folders and tables.

    >>> policy_label("transformers:runs/default/sft/model")
    'sft'
    >>> policy_label("openai:qwen3-vl-8b@http://h:8000/v1")
    'qwen3-vl-8b'
    >>> [policy_label(s) for s in ("direct", "direct:transformers:runs/r/grpo/final", "heuristic")]
    ['direct', 'direct-grpo', 'teacher']
    """
    spec = spec.strip()
    if spec in ("teacher", "heuristic"):
        return "teacher"
    if spec in ("base", "direct"):
        return spec
    if spec.startswith("direct:"):
        return "direct-" + policy_label(spec[len("direct:"):])
    kind, _, rest = spec.partition(":")
    if kind == "openai":
        at = rest.rfind("@http")
        return slug((rest[:at] if at >= 0 else rest) or "openai")
    target = rest if kind == "transformers" else spec
    parts = [p for p in Path(target.rstrip("/")).parts if p not in ("", ".")]
    if not parts:
        return "policy"
    name = parts[-1]
    if name.lower() in GENERIC_CHECKPOINT_NAMES and len(parts) > 1:
        name = parts[-2]
    return slug(name)


def _path_like(spec: str) -> bool:
    return Path(spec).exists() or spec.startswith((".", "/", "~"))


def _chat_from_spec(spec: str, batch: int = 1, device: str = "auto") -> ChatBackend:
    """The chat backend of a spec; a local image-text model comes behind the batcher (up to
    ``batch`` concurrent episodes decode together, each from its own KV cache)."""
    if spec == "base":
        from vsearcher_lite.model.tiny import default_base_dir

        spec = f"transformers:{default_base_dir()}"
    elif not spec.startswith(("openai", "transformers:")) and (_path_like(spec) or "/" in spec):
        spec = f"transformers:{spec}"  # a bare checkpoint folder (or hub id)
    if spec.startswith("transformers:"):
        path = spec[len("transformers:"):]
        if not path.strip():
            raise InputError("policy 'transformers:' needs a model folder or hub id after the "
                             "colon")
        # "org/name" is a hub id; a deeper or rooted path is meant as a local folder
        looks_local = _path_like(path) or path.count("/") >= 2
        if looks_local and not (Path(path) / "config.json").is_file():
            raise InputError(f"{path}: no model here (no config.json); train it first or give "
                             "another --policy")
    local = {"device": str(resolve_device(device))} if spec.startswith("transformers:") else {}
    chat = make_chat(spec, **local)
    if isinstance(chat, TransformersChat) and chat.processor is not None:
        # an image-text model continues each episode from its KV cache, one episode or many
        return BatchedTransformersChat(chat.model, chat.processor, max_batch=batch, max_wait_s=0.05,
                                       max_new_tokens=chat.max_new_tokens)
    return chat


def backend_batch(backend: ChatBackend) -> int:
    """How many requests ``backend`` answers in one call (1 unless it is a batcher)."""
    return backend.max_batch if isinstance(backend, LockstepBatcher) else 1


def direct_policy(backend: ChatBackend, config, *, name: str = "direct",
                  spec: str = "direct") -> Policy:
    """The no-tools ablation of ``backend``: a tool-free system prompt and no tool call allowed."""
    wrapped = DirectAnswerPolicy(backend, today=config.today, variant=config.prompt_variant,
                                 force_answer=forces_answers(backend))
    return Policy(name, spec, lambda task: wrapped, tools=False, shared=wrapped,
                  batch=backend_batch(backend))


def make_policy(spec: str | ChatBackend | Policy, config) -> Policy:
    """A ``Policy`` from a spec (see the module docstring), a chat backend, or a ``Policy``."""
    if isinstance(spec, Policy):
        if spec.spec in ("teacher", "heuristic") and spec.tools:
            # the heuristic teacher plans within this evaluation's tool-call limit, not the one
            # it was built with
            return replace(spec, for_task=make_policy(spec.spec, config).for_task)
        return spec
    if isinstance(spec, ChatBackend):
        name = getattr(spec, "name", type(spec).__name__)
        return Policy(slug(name), name, lambda task: spec, shared=spec, batch=backend_batch(spec))
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"policy {spec!r}: give teacher, base, direct[:<spec>] or a chat spec")
    spec = spec.strip()
    if spec in ("teacher", "heuristic"):
        if config.world != "sandbox":
            raise InputError("the heuristic teacher only works in the sandbox; give --policy "
                             "openai:<model>@<base_url>")
        def teacher(task):
            return HeuristicTeacher(task, seed=config.seed, mistake_rate=config.mistake_rate,
                                    style=config.prompt_variant,
                                    max_tool_calls=config.max_tool_calls)

        return Policy("teacher", spec, teacher, uses_seed=True)
    if spec == "direct" or spec.startswith("direct:"):
        inner_spec = spec[len("direct:"):] if spec.startswith("direct:") else "base"
        if inner_spec in ("teacher", "heuristic", "direct") or inner_spec.startswith("direct:"):
            raise InputError(f"policy {spec!r}: the direct ablation needs a model, e.g. "
                             "direct:base or direct:openai:<model>@<url>")
        return direct_policy(_chat_from_spec(inner_spec, config.batch, config.device), config,
                             name=policy_label(spec), spec=spec)
    backend = _chat_from_spec(spec, config.batch, config.device)
    return Policy(policy_label(spec), spec, lambda task: backend, shared=backend,
                  batch=backend_batch(backend))
