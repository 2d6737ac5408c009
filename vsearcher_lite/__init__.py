"""vsearcher-lite: a notebook-first, runnable reproduction of VSearcher.

Stage -> the library function the CLI, the notebooks and the tests call (under ``vsearcher_lite``):

    world          world.store.build_world                the sandbox web: SQLite store, pictures
    tools          tools.factory.make_toolbox             text_search, image_search, visit
    seeds          synthesis.seeds.run_seeds              seed entities
    inject-text    synthesis.inject.run_inject_text       initial QA, text injection rounds
    inject-image   synthesis.inject.run_inject_image      image injection
    filter         synthesis.filters.run_filter           the four filters, the splits, the exam
    trajectories   agent.trajectories.generate_trajectories   teacher episodes, rejection sampling
    format-check   agent.commands.format_check_file       the strict format check of a file
    pretrain       model.pretrain.pretrain                the cpu profile's tiny base
    sft            training.sft.run_sft                   supervised fine-tuning
    grpo           rl.grpo.run_grpo                       multi-turn GRPO, cpu or TRL engine
    eval           evaluation.evaluate.evaluate           any policy on a benchmark, judged
    comparison     evaluation.comparison.run_comparison   ``eval --compare``: table 1, figure 4
    reproduce      notebooks.reproduce                    every notebook, in order
    reference      reference.run_reference                the shipped full-length run
    bench          bench.run_bench                        performance benchmarks

The shared layers below the stages:

    runio      run folders, atomic writes, resumable JSONL, ``InputError``
    manifest   ``RUN_DIR/run_manifest.json``: each stage's settings, seeds, versions, commit
    config     ``EvalConfig``, the shared training settings, range checks
    options    command-line options built from the fields of a settings dataclass
    profiles   one TOML file of settings per profile; ``load_profile``, ``with_overrides``
    runtime    the device, thread count and heap behaviour of a process
    cache      the SQLite cache of tool and API calls
    net        HTTP client, SSRF guard, secrets
    chat       the chat backends (OpenAI-compatible HTTP, local transformers, batched)

``cli`` is the ``vsearcher-lite`` command; ``report`` and ``stepper`` draw HTML views.
"""

__version__ = "0.1.0"
