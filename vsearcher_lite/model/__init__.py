"""The cpu profile's tiny base VLM: tokenizer, model, pretraining corpus, pretraining.

``vsearcher_lite.model.tiny`` registers the image-only processor with ``AutoProcessor`` when it is
imported, so ``AutoProcessor.from_pretrained`` then loads a saved tiny base; ``tiny.load_base``
does both. This package itself imports nothing heavy (the CLI imports it to list commands).
"""
