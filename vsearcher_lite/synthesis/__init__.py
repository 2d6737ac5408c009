"""Data synthesis (paper sections 2.1, 2.4, A.2): seeds, text and image injection, filters, exam.

Stage -> library function (the CLI and notebooks 01-04 call it) -> outputs in ``RUN_DIR``:

    seeds         seeds.run_seeds          seeds/{seeds.jsonl, population.csv}
    inject-text   inject.run_inject_text   inject-text/{tasks.jsonl, failed.jsonl}
    inject-image  inject.run_inject_image  inject-image/{tasks.jsonl, failed.jsonl, images/}
    filter        filters.run_filter       filter/{labeled, train, train_<level>, heldout,
                                           exam}.jsonl, funnel.csv

Each stage also writes its ``metrics.json``. Roles: ``writer.Writer`` with ``writer.RuleWriter``
(sandbox) and ``llm_writer.LLMWriter`` (any chat backend); the filters in ``filters``.
``synthesizer`` builds one task, ``runner`` runs many; ``describe`` holds the fact index and the
wording, ``text`` the string helpers, ``chain`` re-solves a finished question, ``sources`` reads
the sandbox or the live web, ``images`` fetches live pictures, ``plots`` the notebooks' figures,
``bench`` the ``bench`` section, ``commands`` the four subcommands. The task record the stages
write is ``agent.task``.
"""
