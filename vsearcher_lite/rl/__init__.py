"""Stage `grpo`, multi-turn GRPO (paper 2.3, A.4): ``grpo`` (``run_grpo``, the engine dispatch),
``config`` (``GRPOConfig``), ``objective`` (the maths), ``rollout`` (episodes as training rows),
``inputs`` (start checkpoint, tasks, sampler), ``steps`` (the step log), ``paired_eval`` (SFT and
RL on the held-out tasks), ``cpu_engine`` and ``update`` (the plain PyTorch engine),
``trl_engine`` (TRL's GRPOTrainer), ``plots``, ``commands`` (``vsearcher-lite grpo``)."""
