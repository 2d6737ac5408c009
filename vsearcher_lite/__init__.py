"""vsearcher-lite: a notebook-first, runnable reproduction of VSearcher.

Stage -> the library function the CLI, the notebooks and the tests call (under ``vsearcher_lite``):

    world          world.store.build_world                       the sandbox web: store, pictures
    tools          backends.toolbox.make_toolbox                 text_search, image_search, visit
    seeds          synthesis.seeds.run_seeds                     seed entities
    inject-text    synthesis.inject.run_inject_text              initial QA, text injection rounds
    inject-image   synthesis.inject.run_inject_image             image injection
    filter         synthesis.filters.run_filter                  the filters, the splits, the exam
    trajectories   synthesis.trajectories.generate_trajectories  teacher, rejection sampling
    format-check   agent.commands.format_check_file              the strict format check of a file
    pretrain       recipes.pretraining.pretrain.pretrain         the cpu profile's tiny base
    sft            training.sft.run_sft                          supervised fine-tuning
    grpo           rl.grpo.run_grpo                              multi-turn GRPO, cpu or TRL engine
    eval           scoring.evaluate.evaluate                     any policy on a benchmark, judged
    comparison     evaluation.comparison.run_comparison          ``eval --compare``: table 1, fig. 4
    reproduce      notebooks.reproduce                           every notebook, in order
    reference      reference_run.run_reference                   the shipped full-length run
    bench          sandbox_bench.run_bench                       the sandbox's benchmarks

Imports flow one way, from the stages down to the shared layers below them (bottom first; a test
in ``tests/test_architecture.py`` holds the list):

    runio      run folders, atomic writes, resumable JSONL, ``InputError``
    profiles   one TOML file of settings per profile; ``load_profile``, ``with_overrides``
    cache      the SQLite cache of tool and API calls
    stepper    the offline step-through views of notebooks 02 and 05
    redaction  masking API keys wherever text leaves the program
    options    command-line options built from the fields of a settings dataclass
    runtime    the device, thread count and heap behaviour of a process
    net        HTTP client and SSRF guard (loaded only where a request is made)
    manifest   ``RUN_DIR/run_manifest.json``: each stage's settings, seeds, versions, commit
    model      the cpu profile's tiny base VLM: tokenizer and architecture
    chat       the chat interface and local backends (transformers, batched; the KV-cache
               engine that continues each episode)
    world      the sandbox web
    tools      the tools and their sandbox backends
    live       the live web: Wikidata and Wikipedia, the live tools, API keys, the OpenAI-
               compatible chat client; imported only when a setting chooses it
    backends   a run's toolbox and a role's chat backend from their settings
    agent      protocol, format check, judges, the ReAct loop, teachers, exports
    config     ``EvalConfig``, the shared training settings, range checks
    scoring    the evaluation runner, policy specs, metrics (used by sft, grpo and eval)

then the stages: synthesis; training; rl; ``widgets`` (the explorers of notebooks 05 and 07);
evaluation; and above them ``reference`` (the card)
and ``reference_run``, ``report`` (report.html), ``notebooks`` and ``cli``. Apart from the
course, at the stages' level: ``recipes.pretraining``, the recipe of the tiny base (which ships
in ``data/tiny_base``), and ``sandbox_bench``, the sandbox's benchmarks (``vsearcher-lite
bench``).
"""

import os
import sys

__version__ = "0.1.0"

#: GNU OpenMP's usual spin-wait between parallel regions (``keep_openmp_spin``).
OPENMP_SPIN = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}


def keep_openmp_spin() -> bool:
    """Keep OpenMP's threads spinning between parallel regions; True when set here.

    GNU OpenMP keeps a team of threads for each thread that runs torch operations. Once a process
    has more of them than cores (the thread that loaded the model and the batcher's generation
    thread), it cuts their spin-wait to almost nothing, and each of a decode step's thirty small
    parallel regions then waits for its threads to wake: a step ran 1.4x slower on the generation
    thread (``benchmarks/decode_step.py``). OpenMP reads the variables when torch loads, so this
    runs on import of the package and does nothing once torch is loaded or where the user has
    set either variable.
    """
    if "torch" in sys.modules or any(name in os.environ for name in OPENMP_SPIN):
        return False
    os.environ.update(OPENMP_SPIN)
    return True


keep_openmp_spin()
