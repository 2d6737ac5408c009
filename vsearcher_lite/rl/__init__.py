"""Stage 07, multi-turn GRPO: ``objective`` (the maths), ``rollout`` (episodes as training rows),
``batched_chat`` (many episodes, one batched model), ``trainer`` (the cpu engine and the stage),
``trl_engine`` (TRL's GRPOTrainer), ``plots``, ``commands`` (``vsearcher-lite grpo``)."""
