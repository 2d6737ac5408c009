"""Stage ``pretrain``: pretraining the cpu profile's tiny base (``model``) from scratch.

Not part of a normal run (the base ships in ``data/tiny_base``). Modules: ``worlds`` and
``corpus`` (the pretraining documents), ``packing`` (rows and losses), ``pretrain`` (the
stage), ``probes`` (copying and agent probes), ``card`` (the model card) and ``commands``
(``vsearcher-lite pretrain``). This package itself imports nothing heavy (the CLI imports it).
"""
