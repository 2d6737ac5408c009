"""Recipes: how the project made what the course starts from, kept apart from the course.

``pretraining`` is the recipe of the cpu profile's tiny base (``vsearcher-lite pretrain``); the
base itself ships in ``data/tiny_base``, so no run of the course needs this package.
"""
