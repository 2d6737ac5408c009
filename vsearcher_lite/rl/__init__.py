"""Stage 07, multi-turn GRPO: ``objective`` (the maths), ``rollout`` (episodes as training rows),
``inputs`` (start checkpoint, tasks, sampler), ``steps`` (the step log), ``paired_eval`` (SFT and
RL on the held-out tasks), ``update`` and ``cpu_engine`` (the plain PyTorch engine),
``trl_engine`` (TRL's GRPOTrainer), ``trainer`` (the engine dispatch), ``plots``, ``commands``
(``vsearcher-lite grpo``)."""
