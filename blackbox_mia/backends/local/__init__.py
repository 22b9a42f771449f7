"""White-box backend: any Hugging Face causal LM through torch (CUDA when present, else CPU).

* :mod:`.config`: :class:`LocalConfig`;
* :mod:`.backend`: :class:`LocalBackend` (scoring, next-token distributions, generation);
* :mod:`.resources`: threads and the memory budget of one forward pass (batch shapes);
* :mod:`.reduce`: log-probs and vocabulary statistics from hidden states, chunk by chunk.
"""

from .backend import LocalBackend
from .config import LocalConfig

__all__ = ["LocalBackend", "LocalConfig"]
