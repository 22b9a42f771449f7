"""A backend kind defined outside the package (issue 44: a new kind is 2 files, its kind and
its backend module): ``uniform:NAME?vocab=V`` gives every byte of a text the log-prob
``-ln V`` (nats). It registers itself when imported; an installed distribution names this
module in the ``blackbox_mia.backends`` entry-point group, and the command line then takes
``--target uniform:NAME`` and the flag ``--uniform-vocab`` (from :func:`setting`) with no line
of the package changed (tests/unit/test_backend_plugin.py)."""

from __future__ import annotations

from dataclasses import dataclass

from blackbox_mia.backends.base import Backend
from blackbox_mia.backends.options import KindOptions, register_backend, setting


@dataclass(frozen=True)
class UniformOptions(KindOptions):
    """Settings of a ``uniform:`` model.

    Attributes:
        vocab: the vocabulary size V ≥ 256 the model spreads its probability over evenly.
    """

    vocab: int = setting(256, flag="--uniform-vocab", help="vocabulary of the uniform model (tokens)",
                         panel="Uniform model", at_least=256)


@register_backend("uniform", UniformOptions, "uniform:NAME")
def build_uniform(name: str, options: UniformOptions) -> Backend:
    """A :class:`~.uniform_backend.UniformBackend` named ``name``."""
    from .uniform_backend import UniformBackend

    return UniformBackend(name or "uniform", options.vocab)
