"""Stage `eval` (paper sections 2.4, 3.2 and 4): benchmark loaders, the comparison, the command.

- ``benchmarks``: MM-SearchExam, MMSearch, BrowseComp-VL, SimpleVQA and the project's own task
  files as ``Task`` records, with a local, content-addressed image cache; ``benchmark_formats``
  holds the per-format row parsers;
- ``comparison``: notebook 08 and ``eval --compare``, base / SFT / RL / teacher on the
  run's exam and held-out tasks (the paper's table 1 and figure 4 for one run);
- ``plots``: the table and the figures, redrawn from the saved metrics;
- ``commands``: the ``vsearcher-lite eval`` subcommand.

The runner these call, ``scoring.evaluate.evaluate``, sits below the training stages, which
evaluate with it too.
"""
