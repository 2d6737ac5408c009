"""Scoring a policy on tasks: the evaluation runner the SFT, GRPO and eval stages share.

- ``evaluate``: ``evaluate(run_dir, tasks, policy, ...)``, any policy through the ReAct loop,
  judged, resumable; its settings are ``config.EvalConfig``;
- ``policies``: the policy specs (``teacher``, ``base``, a chat spec, ``direct:<spec>``);
- ``metrics``: one record per task, Pass@1 and its breakdowns, the tables;
- ``identity``: what stored results were made with, and when they may be reused;
- ``passk``: K sampled evaluations of the same tasks, Pass@k by level and the tasks with mixed
  outcomes (what RL can reach and learn from);
- ``hops``: how far along its task's chain of hops an episode got, read from the agent's own
  sentences (``benchmarks/hop_reach.py``).

None of these imports a stage, so training, RL and ``evaluation`` all call the same runner.
"""
