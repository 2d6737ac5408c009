"""The models the stages load: the cpu profile's tiny base VLM (the local chat backend, SFT, GRPO,
evaluation, pretraining), and a toy-width stand-in for the real Qwen3-VL checkpoints the GPU
profiles train.

Modules: ``tokenizer`` (byte-level BPE with single-token markup and years), ``tiny`` (config,
image-only processor, build, save, load), ``thinking_template`` (the Qwen3-VL Thinking chat
template and its training twin) and ``real_shape`` (a folder laid out like a published Qwen3-VL
Thinking checkpoint, at toy widths). Importing ``tiny`` registers the image-only processor with
``AutoProcessor``; this package itself imports nothing heavy. Pretraining the base is the
``recipes.pretraining`` package's stage.
"""
