"""The TRL engine: ``trl.GRPOTrainer`` driven by this project's rollouts (the GPU profiles); it
writes the same files as the cpu engine. How the pieces meet (TRL 1.16):

- The dataset holds one row per task draw (the difficulty mix), in order: the episode's first
  messages, the question image and the task id. TRL repeats each row G times.
- ``rollout_func`` runs one episode per row in lockstep over the trainer's model (or TRL's
  colocated vLLM), judged and encoded by ``rollout.rollout_groups``, and returns ``prompt_ids``
  (equal to TRL's own rendering of the prompt, from which TRL rebuilds the pixel values),
  ``completion_ids``, ``env_mask`` (the loss mask: policy tokens minus exclusions and, with
  ``fatal_aware``, the post-fatal ones), the reward, the fatal flag and the tool images.
- ``VSearcherGRPOTrainer`` adds what TRL cannot express: (1) it hands the batch's rows to the
  rollout function, which only receives the prompts; (2) TRL's rollout_func path carries only the
  prompt's images, so it adds the tool calls' images and lets TRL's tool-image path
  (``self.tools`` set for one batch) build the pixel values; (3) the fatal-aware clamp
  ``max(A, 0)`` after TRL's group normalisation.

Unlike the cpu engine, zero-variance groups are not dropped (no gradient, but their tokens count
in the per-token normaliser and the KL), and TRL logs the entropy of trained tokens only.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from vsearcher_lite.agent.judge import make_judge
from vsearcher_lite.agent.protocol import SANDBOX_TODAY, initial_messages
from vsearcher_lite.chat.batched import BatchedTransformersChat, BatchedVLLMChat
from vsearcher_lite.manifest import write_manifest
from vsearcher_lite.rl.config import GRPOConfig
from vsearcher_lite.rl.inputs import (
    TaskSampler,
    check_pool_unseen,
    resolve_init,
    rollout_settings,
    rollout_toolbox,
    train_tasks,
)
from vsearcher_lite.rl.objective import clamp_fatal_advantage, loss_mask
from vsearcher_lite.rl.paired_eval import eval_summary, evaluate_pair
from vsearcher_lite.rl.rollout import TrajectoryEncoder, load_example, rollout_groups
from vsearcher_lite.rl.steps import has_signal, step_row, steps_csv, training_summary
from vsearcher_lite.runio import InputError, JsonlLog, RunDir, atomic_write_text
from vsearcher_lite.runtime import end_progress, progress_bar, resolve_device, set_threads
from vsearcher_lite.training.checkpoint import (
    freeze_vision,
    load_model,
    lora_config,
    save_checkpoint,
    suppress_vision_tokens,
)
from vsearcher_lite.training.data import with_string_parts
from vsearcher_lite.training.sft_trainer import STOP_NOTES, one_progress_bar

_TOOL_IMAGES_MARKER = "tool images in completions"


# ---------------------------------------------------------------------------------------------
# The dataset


def prompt_row(task, prompt_variant: str, today: str | None) -> dict:
    """One dataset row: the episode's first two messages (list-of-parts), image path, task id."""
    messages = initial_messages(task.question, task.image_path, today=today, variant=prompt_variant)
    return {"prompt": with_string_parts({"messages": messages})["messages"],
            "images": [str(Path(task.image_path).resolve())] if task.image_path else [],
            "task_id": task.id}


def split_prompt_completion(ids: list[int], mask: list[int], prompt_tokens: int,
                            end_id: int) -> tuple[list, list, list]:
    """``(prompt_ids, completion_ids, env_mask)`` of one rendered trajectory: the prompt ends where
    the first assistant turn starts; the template's newline after the last ``<|im_end|>`` goes.

    >>> split_prompt_completion([1, 2, 7, 2, 9], [0, 0, 1, 1, 0], 2, end_id=2)
    ([1, 2], [7, 2], [1, 1])
    """
    prompt, completion, env = ids[:prompt_tokens], ids[prompt_tokens:], mask[prompt_tokens:]
    prompt, completion, env = list(prompt), list(completion), list(env)
    if len(completion) >= 2 and completion[-2] == end_id and completion[-1] != end_id:
        completion, env = completion[:-1], env[:-1]
    return prompt, completion, env


def realign_at_prompt(ids: list[int], mask: list[int], prompt: list[int], decode: Callable,
                      encode: Callable) -> tuple[list[int], list[int]] | None:
    """``(ids, mask)`` of a rendered trajectory made to start with TRL's ``prompt`` ids. Rendered
    whole, the prompt's last token can merge with the reply's first: a Thinking template's
    prompt ends ``<think>\\n`` and a reply that opens with a newline makes ``\\n\\n``, one Qwen
    token. That token is split back at the prompt's end, the reply's part keeping its loss mask.
    ``None`` when the rendering does not start with the prompt's text.

    >>> text = {1: "a", 2: "\\n", 3: "\\n\\n", 4: "b"}
    >>> decode = lambda ids: "".join(text[i] for i in ids)
    >>> realign_at_prompt([1, 3, 4], [0, 1, 1], [1, 2], decode, lambda t: [2])
    ([1, 2, 2, 4], [0, 0, 1, 1])
    >>> realign_at_prompt([1, 2, 4], [0, 0, 1], [1, 2], decode, lambda t: [2])
    ([1, 2, 4], [0, 0, 1])
    """
    n = len(prompt)
    if list(ids[:n]) == list(prompt):
        return list(ids), list(mask)
    same = 0
    while same < min(len(ids), n) and ids[same] == prompt[same]:
        same += 1
    if same >= len(ids):
        return None
    tail, merged = decode(prompt[same:]), decode(ids[same:same + 1])
    if merged == tail or not merged.startswith(tail):
        return None
    rest = list(encode(merged[len(tail):]))
    return (list(ids[:same]) + list(prompt[same:]) + rest + list(ids[same + 1:]),
            list(mask[:same]) + [0] * (n - same) + [mask[same]] * len(rest)
            + list(mask[same + 1:]))


# ---------------------------------------------------------------------------------------------
# The rollout function


def make_rollout_func(run_dir: str | Path, config: GRPOConfig, processor, log_rows: list,
                      rollout_log: JsonlLog | None):
    """``rollout_func(prompts, trainer)`` for ``GRPOTrainer`` (see the module docstring)."""
    tasks = {t.id: t for t in train_tasks(run_dir, config)}
    settings = rollout_settings(config)
    encoder = TrajectoryEncoder(processor)
    toolbox = rollout_toolbox(run_dir, config)
    judge = make_judge(config.judge)
    state = {"call": 0}

    def rollout_func(prompts: list, trainer) -> dict:
        from trl.models import unwrap_model_for_generation

        rows = getattr(trainer, "_rollout_rows", None)
        if rows is None or len(rows) != len(prompts):
            raise RuntimeError("rollout_func needs VSearcherGRPOTrainer (it passes the rows)")
        batch_tasks = [tasks[r["task_id"]] for r in rows]
        t0 = time.perf_counter()
        gather = trainer.args.ds3_gather_for_generation
        with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                         gather_deepspeed3_params=gather) as model:
            batch = min(len(prompts), config.rollout_batch or len(prompts))
            if trainer.use_vllm:
                backend = BatchedVLLMChat(trainer.vllm_generation, processor, max_batch=batch)
            else:
                backend = BatchedTransformersChat(model, processor, max_batch=batch,
                                                  max_new_tokens=config.max_tokens)
            groups = rollout_groups(backend, toolbox, batch_tasks, 1, settings, judge, encoder,
                                    step=state["call"], first_sample=repeat_numbers(batch_tasks))
        samples = [g[0] for g in groups]
        out = trl_fields(samples, prompts, tasks, processor, encoder, config)
        log_rows.append(rollout_row(state["call"], samples, time.perf_counter() - t0, config))
        if rollout_log is not None:
            rank = trainer.accelerator.process_index
            for s in samples:
                rollout_log.append({"id": f"{state['call']}:{rank}:{s.task_id}:{s.sample_index}",
                                    "step": state["call"], **s.summary()})
        state["call"] += 1
        return out

    return rollout_func


def repeat_numbers(batch_tasks: list) -> list[int]:
    """Each row's sample number among the rows of its task: TRL repeated each task G times, and
    one episode runs per row, so the repeats are numbered to get seeds of their own.

    >>> from types import SimpleNamespace as T
    >>> repeat_numbers([T(id="a"), T(id="a"), T(id="b"), T(id="a")])
    [0, 1, 0, 2]
    """
    seen: dict[str, int] = {}
    first = []
    for t in batch_tasks:
        first.append(seen.get(t.id, 0))
        seen[t.id] = first[-1] + 1
    return first


def trl_fields(samples: list, prompts: list, tasks: dict, processor, encoder: TrajectoryEncoder,
               config: GRPOConfig) -> dict[str, Any]:
    """What ``rollout_func`` hands TRL for one episode per prompt: prompt and completion ids, the
    loss mask (``env_mask``), the reward, the fatal flag and the tool images. Each sample's loss
    mask is set on it too, for ``rollouts.jsonl``."""
    out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "logprobs": None,
                           "env_mask": [], "reward": [], "fatal": [], "tool_images": []}
    tokenizer = encoder.tokenizer
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    for sample, prompt in zip(samples, prompts):
        enc = sample.encoded
        fatal = sample.fatal if config.fatal_aware else None
        mask = loss_mask(enc.policy_mask, excluded=sample.excluded, fatal=fatal,
                         fatal_aware=config.fatal_aware)
        sample.loss_mask, sample.in_loss = mask, any(mask)
        # TRL rebuilds the pixel values from its own rendering of the prompt: the ids must agree
        expected = trl_prompt_ids(processor, prompt)
        aligned = realign_at_prompt(enc.input_ids, mask, expected, decode, encode)
        if aligned is None:
            raise InputError(f"task {sample.task_id}: the rendered trajectory does not start "
                             "with TRL's rendering of the dataset prompt; the chat template "
                             "must be prefix-preserving")
        p, c, env = split_prompt_completion(*aligned, len(expected), encoder.end_id)
        out["prompt_ids"].append(p)
        out["completion_ids"].append(c)
        out["env_mask"].append(env)
        out["reward"].append(sample.reward)
        out["fatal"].append(fatal is not None)
        n_prompt_images = 1 if tasks[sample.task_id].image_path else 0
        out["tool_images"].append(tool_images(sample.example, n_prompt_images))
    return out


def rollout_row(call: int, samples: list, seconds: float, config: GRPOConfig) -> dict:
    """The ``steps.csv`` numbers of one rollout call, over the groups this process rolled out
    (TRL's logs fill in the update's when the step ends)."""
    by_task: dict[str, list] = {}
    for sample in samples:
        by_task.setdefault(sample.task_id, []).append(sample)
    flat = sum(1 for group in by_task.values() if not has_signal(group))
    counts = {"zero_variance_groups": flat, "groups": len(by_task)}
    return step_row(call, samples, counts, {"entropy": None}, {}, {"rollout_seconds": seconds},
                    config.learning_rate)


def trl_prompt_ids(processor, prompt: list[dict]) -> list[int]:
    """The token ids TRL renders for a dataset prompt (images filled in, generation prompt on)."""
    from trl.data_utils import apply_chat_template

    text = apply_chat_template({"prompt": prompt}, processor)["prompt"]
    parts = [p for m in prompt if isinstance(m["content"], list) for p in m["content"]]
    images = [p["image"] for p in parts
              if isinstance(p, dict) and p.get("type") == "image" and p.get("image") is not None]
    encoded = processor(images=images or None, text=[text], return_tensors=None)
    return [int(i) for i in encoded["input_ids"][0]]


def tool_images(example: dict, n_prompt_images: int) -> list:
    """The PIL images of an example after the prompt's own: the ones tool calls returned."""
    if len(example["images"]) <= n_prompt_images:
        return []
    return load_example(example)["images"][n_prompt_images:]


# ---------------------------------------------------------------------------------------------
# The subclass


def trainer_class():
    """``VSearcherGRPOTrainer``: ``GRPOTrainer`` plus the module docstring's three additions."""
    import torch
    from trl import GRPOTrainer

    class VSearcherGRPOTrainer(GRPOTrainer):
        def __init__(self, *args, fatal_aware: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            self.fatal_aware = fatal_aware
            self._rollout_rows = None

        def _generate_and_score_completions(self, inputs):
            self._rollout_rows = inputs  # (1) the rows behind the prompts
            saved_tools = self.tools
            try:
                output = super()._generate_and_score_completions(inputs)
            finally:
                self.tools = saved_tools
                self._rollout_rows = None
            if self.fatal_aware:  # (3) one-sided clamp after TRL's group normalisation
                adv = output["advantages"]
                fatal = [bool(x.get("fatal", False)) for x in inputs]
                output["advantages"] = torch.tensor(
                    [clamp_fatal_advantage(float(a), f) for a, f in zip(adv.tolist(), fatal)],
                    dtype=adv.dtype, device=adv.device)
            return output

        def _generate(self, prompts):
            (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images,
             tool_images_) = super()._generate(prompts)
            extra_tool_images = extra_fields.pop("tool_images", None)
            if extra_tool_images and any(extra_tool_images):  # (2) tool images in the completions
                prompt_images = [[p["image"] for m in prompt if isinstance(m.get("content"), list)
                                  for p in m["content"]
                                  if isinstance(p, dict) and p.get("type") == "image"]
                                 for prompt in prompts]
                images = [pi + ti for pi, ti in zip(prompt_images, extra_tool_images)]
                tool_images_ = extra_tool_images
                # TRL's tool-image forward path; restored after this batch
                self.tools = [_TOOL_IMAGES_MARKER]
            return (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields,
                    images, tool_images_)

    return VSearcherGRPOTrainer


def judged_reward(prompts, completions, reward, **kwargs) -> list[float]:
    """The reward the rollout got from the judge (paper eq. 6, ``objective.trajectory_reward``)."""
    return [float(r) for r in reward]


# ---------------------------------------------------------------------------------------------
# Settings and the stage


def trl_args(config: GRPOConfig, output_dir: Path, world_size: int = 1):
    """The ``trl.GRPOConfig`` of a run: P x G trajectories per optimizer step."""
    from trl import GRPOConfig as TRLGRPOConfig

    per_step = config.prompts_per_step * config.generations
    per_device = min(config.micro_batch_size, per_step)
    if per_step % (per_device * world_size):
        raise InputError(f"P x G = {per_step} trajectories per step must split into micro-batches "
                         f"of {per_device} on {world_size} process(es); change --prompts, "
                         "--generations or micro_batch_size")
    accumulation = per_step // (per_device * world_size)
    c = config
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir), per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation, steps_per_generation=accumulation,
        num_generations=c.generations, max_steps=c.max_steps or 1,
        learning_rate=c.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
        adam_beta1=c.adam_beta1, adam_beta2=c.adam_beta2, weight_decay=c.weight_decay,
        max_grad_norm=c.max_grad_norm, beta=c.beta, epsilon=c.clip_low, epsilon_high=c.clip_high,
        num_iterations=c.mu, loss_type="dapo" if c.aggregation == "token" else "grpo",
        scale_rewards="group" if c.scale_rewards else "none", temperature=c.temperature,
        top_p=c.top_p, max_completion_length=c.max_tokens, shuffle_dataset=False,
        remove_unused_columns=False, activation_checkpointing=c.gradient_checkpointing,
        use_cpu=c.use_cpu, bf16=c.dtype == "bfloat16" and not c.use_cpu, logging_steps=1,
        save_strategy="no", report_to=c.report_to or "none", seed=c.seed, data_seed=c.seed,
        dataloader_num_workers=0, disable_tqdm=not c.progress, log_completions=False,
    )
    if c.use_vllm:
        # vLLM's context is the episode's budget (prompt + response), not the model config's
        # 262,144 positions, whose KV cache would not fit beside the training model
        window = ((c.max_prompt_tokens or 0) + (c.max_response_tokens or 0)) or None
        kwargs.update(use_vllm=True, vllm_mode=c.vllm_mode,
                      vllm_importance_sampling_correction=False,
                      vllm_max_model_length=window,
                      vllm_gpu_memory_utilization=c.vllm_gpu_memory_utilization,
                      generation_kwargs={"stop": ["<tool_response>"]})
    return TRLGRPOConfig(**kwargs)


def task_dataset(config: GRPOConfig, tasks: list, log: Callable[[str], None]):
    """The ``datasets.Dataset`` of the whole run: P task draws per step by the difficulty mix, in
    order (TRL repeats each row G times and does not shuffle). The cpu engine's task choices that
    depend on rollouts (the pre-screen, dynamic sampling) cannot shape a dataset made before
    training: they are noted and left out."""
    import datasets

    sampler = TaskSampler(tasks, config.difficulty_mix, seed=config.seed)
    if config.curriculum != "mix":
        log(f"[grpo] the trl engine draws tasks by the difficulty mix; curriculum="
            f"{config.curriculum!r} is a cpu-engine option")
    if config.dynamic_sampling:
        log("[grpo] the trl engine trains on the groups as drawn; "
            "dynamic sampling is a cpu-engine option")
    n_steps = config.max_steps or 1
    today = SANDBOX_TODAY if config.world == "sandbox" else None
    rows = [prompt_row(t, config.prompt_variant, today)
            for _ in range(n_steps) for t in sampler.draw(config.prompts_per_step)]
    return datasets.Dataset.from_list(rows).cast_column("images",
                                                        datasets.Sequence(datasets.Image()))


def step_logger(out: Path, log_rows: list[dict], budget_s: float | None,
                progress: bool = False):
    """A ``TrainerCallback`` writing one ``steps.csv`` row per optimizer step (the main process
    writes the file; every process keeps the rows), from the last rollout's numbers and TRL's
    logs, and stopping training once ``budget_s`` has passed. With
    ``progress`` it shows the run's one progress bar, in place of transformers' own."""
    from transformers import TrainerCallback

    class StepLog(TrainerCallback):
        def __init__(self):
            self.start = time.perf_counter()
            self.stopped_by = "steps"
            self.rows: list[dict] = []
            self.bar = None

        def on_train_begin(self, args, state, control, **kw):
            if progress and state.is_world_process_zero:
                self.bar = progress_bar("grpo", state.max_steps, initial=state.global_step)

        def on_step_end(self, args, state, control, **kw):
            if self.bar is not None:
                self.bar.update(1)
            if budget_s and time.perf_counter() - self.start >= budget_s:
                control.should_training_stop = True
                self.stopped_by = "time"

        def on_train_end(self, args, state, control, **kw):
            if self.bar is not None:
                end_progress(self.bar, STOP_NOTES.get(self.stopped_by))

        def on_log(self, args, state, control, logs=None, **kw):
            logs = logs or {}
            # the end-of-training summary is logged too, without "loss"
            if "loss" not in logs or not log_rows:
                return
            row = dict(log_rows[-1])
            seconds = round(time.perf_counter() - self.start, 2)
            row.update(step=state.global_step - 1, seconds=seconds,
                       reward=logs.get("reward", row.get("reward")), entropy=logs.get("entropy"),
                       kl=logs.get("kl"), clip_fraction=logs.get("clip_ratio/region_mean"),
                       grad_norm=logs.get("grad_norm"), policy_loss=logs.get("loss"),
                       learning_rate=logs.get("learning_rate"))
            flat_share = logs.get("frac_reward_zero_std")  # share of samples in zero-std groups
            if flat_share is not None:
                row["zero_variance_groups"] = int(round(float(flat_share) * row["groups"]))
            self.rows.append(row)
            if state.is_world_process_zero:  # one writer of the shared file
                atomic_write_text(out / "steps.csv", steps_csv(self.rows))

    return StepLog()


def train_with_trl(run_dir: str | Path, config: GRPOConfig, out: Path, tasks: list, dataset,
                   log: Callable[[str], None]) -> tuple[Any, Any, float]:
    """Load the start model, train it with ``VSearcherGRPOTrainer`` and save it as
    ``out/checkpoint``. ``(the trainer, its step logger, the training seconds)``."""
    model, processor = load_model(config)
    suppress_vision_tokens(model, processor.tokenizer)
    if config.method == "full":  # LoRA trains only its adapters, on the language model
        freeze_vision(model)
    (out / "rollouts.jsonl").unlink(missing_ok=True)
    log_rows: list[dict] = []
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rollout_func = make_rollout_func(run_dir, config, processor, log_rows,
                                     JsonlLog(out / "rollouts.jsonl", key="id"))
    step_log = step_logger(out, log_rows, config.minutes * 60 if config.minutes else None,
                           progress=config.progress)
    trainer = trainer_class()(
        model=model, reward_funcs=[judged_reward],
        args=trl_args(config, out / "trainer", world_size),
        train_dataset=dataset, processing_class=processor, rollout_func=rollout_func,
        peft_config=lora_config(config) if config.method in ("lora", "qlora") else None,
        callbacks=[step_log], fatal_aware=config.fatal_aware)
    one_progress_bar(trainer)
    log(f"[grpo] trl engine: {len(tasks)} training tasks, start {config.init}; "
        f"P={config.prompts_per_step} x G={config.generations}, method {config.method}, "
        f"lr {config.learning_rate:g}, beta {config.beta:g}")
    t0 = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - t0
    save_checkpoint(trainer, processor, out / "checkpoint", config)
    return trainer, step_log, train_seconds


def check_vllm(config: GRPOConfig, world_size: int | None = None) -> None:
    """Refuse, before any model loads, a vLLM run where the vllm package is missing, and a run on
    several processes without vLLM: the project's decoder would then step each process's
    episodes a different number of times while FSDP or ZeRO-3 gathers the weights at every
    forward, and the processes would wait on each other for ever."""
    if config.use_vllm and importlib.util.find_spec("vllm") is None:
        raise InputError("use_vllm is on but the vllm package is not installed: install it, or "
                         "pass --no-vllm to decode with the training model")
    world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
    if not config.use_vllm and world_size > 1:
        raise InputError(f"--no-vllm on {world_size} processes: the training model cannot decode "
                         "the rollouts in step across processes; generate with vLLM (--vllm) "
                         "or train on one process")


def run_grpo_trl(run_dir: str | Path, config: GRPOConfig, *,
                 log: Callable[[str], None] = print) -> dict:
    """TRL's ``GRPOTrainer`` (LoRA / QLoRA / full), then the cpu engine's saving and evaluation."""
    import torch

    wall_start = time.perf_counter()
    check_vllm(config)
    # 1. the inputs: the start checkpoint, the training tasks and their draws
    if config.use_cpu:
        set_threads(config.threads)
    torch.manual_seed(config.seed)
    rd = RunDir(run_dir)
    out = rd.stage(config.name)
    init_path = resolve_init(run_dir, config)
    # resolved once: the model loading (config.base) and the saved settings read it
    config = replace(config, init=str(init_path))
    tasks = train_tasks(run_dir, config)
    check_pool_unseen(run_dir, tasks, config, log)
    dataset = task_dataset(config, tasks, log)
    # 2. training, and the model saved
    trainer, step_log, train_seconds = train_with_trl(run_dir, config, out, tasks, dataset, log)
    checkpoint = out / "checkpoint"
    rows = step_log.rows
    metrics: dict[str, Any] = training_summary(rows, [])
    # TRL keeps no per-trajectory exclusions: the share is the mean of the steps'
    metrics["excluded_share"] = (sum(r.get("excluded_share") or 0 for r in rows) / len(rows)
                                 if rows else None)
    metrics.update(stopped_by=step_log.stopped_by, train_seconds=round(train_seconds, 2),
                   seconds_per_step=round(train_seconds / max(len(rows), 1), 3),
                   init=str(init_path), checkpoint=str(checkpoint), n_train_tasks=len(tasks),
                   engine="trl")
    # 3. the evaluation and the files, on the main process only
    if not trainer.is_world_process_zero():
        return metrics
    shutil.rmtree(out / "trainer", ignore_errors=True)
    del trainer  # its model and optimiser, before the evaluation loads the trained model
    if config.evaluate:
        from vsearcher_lite.model.tiny import load_base

        device = None if config.use_cpu else str(resolve_device(config.device))
        rl_model, rl_processor = load_base(checkpoint, dtype=config.torch_dtype(), device=device)
        evals = evaluate_pair(run_dir, init_path, checkpoint, rl_model, rl_processor, config, log)
        metrics.update(eval_summary(evals))
    metrics["seconds"] = round(time.perf_counter() - wall_start, 2)
    metrics["config"] = config.to_dict()
    rd.write_metrics(config.name, metrics)
    write_manifest(run_dir, config.name, config.to_dict(), metrics["seconds"])
    return metrics
