"""The cpu profile's tiny base VLM: tokenizer, model, pretraining corpus, pretraining.

Modules: ``tokenizer``, ``tiny`` (config, processor, build, save, load), ``worlds`` and
``corpus`` (the pretraining documents), ``packing`` (rows and losses), ``pretrain`` (the
stage), ``probes``, ``card`` and ``commands`` (``vsearcher-lite pretrain``). Importing ``tiny``
registers the image-only processor with ``AutoProcessor``; this package itself imports nothing
heavy (the CLI imports it).
"""
