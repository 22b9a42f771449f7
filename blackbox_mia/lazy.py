"""Names a package re-exports, imported from their modules on first use (PEP 562).

Why: ``import blackbox_mia.evaluation`` (or any of its modules, which runs the package's
``__init__`` first) must not import scikit-learn, scipy and matplotlib before they are needed,
nor ``blackbox_mia.backends.api`` the OpenAI SDK: ``bbmia --help`` and an option error must come
back in well under a second and a half (issue 30), and those libraries alone take longer.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package whose public names are
    imported from their modules on first access, then kept in the package's namespace.

    Args:
        package: the package's ``__name__``.
        exports: public name → the module that defines it, absolute (``blackbox_mia.types``) or
            relative to ``package`` (``.blind``).

    Returns:
        ``(__getattr__, __dir__)``, to assign at the package's top level.

    The returned ``__getattr__`` raises ``AttributeError`` for a name not in ``exports``.
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(vars(sys.modules[package])))

    return __getattr__, __dir__
