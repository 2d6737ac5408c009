"""Every docstring example in the package holds (they are documentation a reader will try)."""

import doctest
import importlib
import pkgutil

import pytest

import vsearcher_lite

MODULES = sorted(m.name for m in pkgutil.walk_packages(vsearcher_lite.__path__, "vsearcher_lite."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    import torch

    torch.set_num_threads(1)
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, name


def test_the_examples_are_many():
    finder = doctest.DocTestFinder()
    found = sum(len(t.examples) for n in MODULES for t in finder.find(importlib.import_module(n)))
    assert found > 150
