"""Data synthesis (paper sections 2.1, 2.2, 2.4, A.2, A.3): seeds, text and image injection,
filters, exam, and the teacher trajectories SFT learns from.

Stage -> library function (the CLI and notebooks 01-05 call it) -> outputs in ``RUN_DIR``:

    seeds         seeds.run_seeds          seeds/{seeds.jsonl, population.csv}
    inject-text   inject.run_inject_text   inject-text/{tasks.jsonl, failed.jsonl}
    inject-image  inject.run_inject_image  inject-image/{tasks.jsonl, failed.jsonl, images/}
    filter        filters.run_filter       filter/{labeled, train, train_<level>, heldout,
                                           exam}.jsonl, funnel.csv
    trajectories  trajectories.generate_trajectories
                                           trajectories/{rollouts.jsonl, accepted.jsonl,
                                           rollouts.csv, export/}

Each stage also writes its ``metrics.json``. Roles: ``writer.Writer`` with ``writer.RuleWriter``
(sandbox) and ``llm_writer.LLMWriter`` (any chat backend); the filters in ``filters``.
``synthesizer`` builds one task, ``runner`` runs many; ``describe`` holds the fact index and the
wording, ``text`` the string helpers, ``chain`` re-solves a finished question, ``sources`` reads
the sandbox or the live web, ``images`` fetches live pictures, ``plots`` and
``trajectory_plots`` the notebooks' figures, ``commands`` the five subcommands. The task record
the stages write is ``agent.task``; the teacher, the judge and the ReAct loop the trajectories
stage runs are in ``agent``.
"""
