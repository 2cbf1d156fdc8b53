"""Every public name of the package says what it is: each module's
``__all__``, and each public class's public methods and properties, has a
docstring of its own."""

from __future__ import annotations

import inspect
import os

import pytest

import tandem

MODULES = [tandem, tandem.share, tandem.blob, tandem.errors]
try:
    import tandem.torch

    MODULES.append(tandem.torch)
except ImportError:
    # Without PyTorch, tandem.torch cannot be imported; CI has it.
    if os.environ.get("CI") == "true":
        raise


def public_names() -> list:
    names = []
    for module in MODULES:
        for name in module.__all__:
            value = getattr(module, name)
            names.append(pytest.param(value, id=f"{module.__name__}.{name}"))
            if inspect.isclass(value):
                for member, attribute in vars(value).items():
                    if not member.startswith("_"):
                        qualified = f"{module.__name__}.{name}.{member}"
                        names.append(pytest.param(attribute, id=qualified))
    return names


def test_every_module_lists_its_public_names():
    for module in MODULES:
        assert module.__all__, module.__name__
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, (module.__name__, missing)


def test_every_exception_class_is_listed():
    # The package's `__all__` is written out for type checkers: a class
    # added without it would be missing from `from tandem import *`.
    classes = {
        name
        for name, value in vars(tandem.errors).items()
        if inspect.isclass(value) and issubclass(value, Exception)
    }
    assert classes == set(tandem.errors.__all__)
    assert classes <= set(tandem.__all__)


@pytest.mark.parametrize("value", public_names())
def test_every_public_name_has_a_docstring(value):
    # A class's `__doc__` is its own (never inherited); a property's or
    # getter's is its getter's, a method's its own.
    doc = getattr(value, "__doc__", None)
    assert doc and doc.strip()
