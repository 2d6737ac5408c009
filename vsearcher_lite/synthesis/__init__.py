"""Data synthesis (paper sections 2.1, 2.4, A.2): seeds, text and image injection, filters, the
exam.

Stage -> module (each stage has one library function; the CLI and notebooks 01-04 call it):

    seeds         seeds.run_seeds           RUN_DIR/seeds/{seeds.jsonl, population.csv,
    metrics.json} inject-text   inject.run_inject_text    RUN_DIR/inject-text/{tasks.jsonl,
    failed.jsonl, metrics.json} inject-image  inject.run_inject_image
    RUN_DIR/inject-image/{tasks.jsonl, failed.jsonl, images/, metrics.json} filter
    filters.run_filter        RUN_DIR/filter/{labeled, train, train_<level>, heldout, exam}.jsonl,
    funnel.csv, metrics.json

Roles: ``writer.Writer`` with ``writer.RuleWriter`` (sandbox) and ``llm_writer.LLMWriter`` (any chat
backend); the filters in ``filters``. ``describe`` holds the fact index and the wording,
``chain`` re-solves a finished question (answer invariance, text-only answers), ``plots`` the
notebooks' figures, ``task`` the task record.
"""
