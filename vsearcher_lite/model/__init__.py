"""The cpu profile's tiny base VLM: its tokenizer and its architecture, used by every stage that
loads it (the local chat backend, SFT, GRPO, evaluation, pretraining).

Modules: ``tokenizer`` (byte-level BPE with single-token markup and years) and ``tiny`` (config,
image-only processor, build, save, load). Importing ``tiny`` registers the image-only processor
with ``AutoProcessor``; this package itself imports nothing heavy. Pretraining the base is the
``recipes.pretraining`` package's stage.
"""
