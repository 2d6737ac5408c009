"""Stage `eval` (paper sections 2.4, 3.2 and 4): benchmark loaders, the evaluation runner.

- ``benchmarks``: MM-SearchExam, MMSearch, BrowseComp-VL, SimpleVQA and the project's own task
  files as ``Task`` records, with a local, content-addressed image cache; ``benchmark_formats``
  holds the per-format row parsers;
- ``evaluate``: the settings (``EvalConfig``) and the runner: any policy through the ReAct loop,
  judged; below it ``policies`` (the policy specs), ``metrics`` (Pass@1 and its breakdowns) and
  ``identity`` (when stored results may be reused);
- ``comparison``: notebook 08 and ``eval --compare``, base / SFT / RL / teacher / no-tools on the
  run's exam and held-out tasks (the paper's table 1 and figure 4 for one run);
- ``plots``: the table and the figures, redrawn from the saved metrics;
- ``commands``: the ``vsearcher-lite eval`` subcommand.
"""
