"""Loading Hugging Face models and tokenizers without waiting on an unreachable hub, and without
their libraries' warnings on the user's screen.

Why: ``from_pretrained("gpt2")`` on a machine without network retries the hub five times with
backoff (46-58 s measured) before it says the files are not cached, and ``HF_HUB_OFFLINE`` is
the only way to stop it. Here a hub name is looked up in the local cache first; only when it is
not there, and the hub answers a 3-second check, is it downloaded; otherwise one error at once
says what to do. Warnings that transformers and torch raise while loading go to this package's
logger (``logging.getLogger("blackbox_mia.hub")``, DEBUG) instead of flooding a notebook.

A GGUF file (llama.cpp's format: tokenizer, configuration and quantized weights in one file) is
read through transformers' GGUF support (the ``gguf`` package; weights are dequantized, which
needs ``accelerate`` too): :func:`check_gguf` refuses, before anything loads, a file that is
not a GGUF, an architecture or quantization transformers cannot read, or a missing package.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from .types import BlackboxMIAError

MODEL_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "seq_length")
"""The fields of a Hugging Face model configuration that give its context in tokens."""

LOG = logging.getLogger(__name__)
HUB_CHECK_TIMEOUT_S = 3.0  # seconds the reachability check of the hub waits for an answer
OFFLINE_ENV = "HF_HUB_OFFLINE"  # huggingface_hub's switch: never contact the hub
T = TypeVar("T")
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file (ggml's gguf.md)
GGUF_INSTALL = "pip install 'blackbox_mia[gguf]'"  # the extra with the gguf package and accelerate


def offline(local_files_only: bool = False) -> bool:
    """Whether the hub must not be contacted: ``local_files_only``, or ``HF_HUB_OFFLINE`` set to
    a true value (``1``, ``true``, ``yes``, ``on``: huggingface_hub's reading of it)."""
    return local_files_only or os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def hub_reachable(timeout_s: float = HUB_CHECK_TIMEOUT_S) -> bool:
    """Whether the Hugging Face hub (``HF_ENDPOINT``, default https://huggingface.co) answers an
    HTTP HEAD within ``timeout_s`` seconds (any HTTP status counts as an answer)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def load_pretrained(load: Callable[..., T], name: str, what: str, local_files_only: bool = False,
                    weights: bool = False, **kwargs) -> T:
    """``load(name, **kwargs)`` (a ``from_pretrained``) that never retries an unreachable hub.

    A directory that exists is loaded as it is; a file is read as a GGUF (checked first by
    :func:`check_gguf`; ``load(its directory, gguf_file=its name)``; a tokenizer gets llama.cpp's
    pre-tokenizer: :func:`~blackbox_mia.tokenizers.gguf_pre.fit_pre_tokenizer`). A hub name
    (``NAME`` or ``ORG/NAME``) is loaded from the local cache alone first; when it is not cached,
    it is downloaded only if neither ``local_files_only`` nor ``HF_HUB_OFFLINE`` forbids it and
    the hub answers (:func:`hub_reachable`). Library warnings raised meanwhile go to the log
    (:func:`library_warnings_logged`).

    Args:
        load: the loader, e.g. ``AutoTokenizer.from_pretrained``.
        name: a model directory, hub name or GGUF file.
        what: what is loaded, for the message (``"model"``, ``"tokenizer"``).
        local_files_only: never contact the hub.
        weights: ``load`` reads the model's weights (a GGUF's quantization must then be one
            that can be dequantized).
        **kwargs: passed to ``load``.

    Raises:
        BlackboxMIAError: one line: not cached and offline, not cached and the hub unreachable,
            a GGUF refused by :func:`check_gguf`, or the loader's own error (an ``OSError``,
            ``ValueError`` or ``RuntimeError``: missing files, a directory that is not a model,
            weights whose shapes do not fit its configuration...).
    """
    with library_warnings_logged():
        try:
            path = Path(name).expanduser()
            if path.is_file():
                from .tokenizers.gguf_pre import fit_pre_tokenizer  # not at the top: tokenizers imports this module

                pre = check_gguf(path, what, weights)
                loaded = load(str(path.parent), gguf_file=path.name, local_files_only=True, **kwargs)
                return fit_pre_tokenizer(loaded, pre) if hasattr(loaded, "backend_tokenizer") else loaded
            if path.exists():
                return load(name, local_files_only=True, **kwargs)
            try:
                return load(name, local_files_only=True, **kwargs)
            except OSError:
                if offline(local_files_only):
                    raise BlackboxMIAError(
                        f"cannot load {what} {name!r}: not in the local Hugging Face cache, and {OFFLINE_ENV} (or "
                        "local_files_only) forbids downloading it; pass a local directory, or download it first "
                        f"(huggingface-cli download {name})") from None
                if not hub_reachable():
                    raise BlackboxMIAError(
                        f"cannot load {what} {name!r}: not in the local Hugging Face cache, and the hub does not "
                        f"answer (no network?); pass a local directory, or download it where there is a network "
                        f"(huggingface-cli download {name})") from None
            return load(name, **kwargs)
        except (OSError, ValueError, RuntimeError) as exc:  # RuntimeError: weights that do not fit the config
            raise BlackboxMIAError(f"cannot load {what} {name!r}: {' '.join(str(exc).split())}") from exc


def check_gguf(path: Path, what: str, weights: bool = False) -> str | None:
    """Refuse, with one line naming the file, a GGUF that transformers cannot read as llama.cpp
    does: the ``gguf`` package missing (and ``accelerate``, for ``weights``), a file that does not
    start with :data:`GGUF_MAGIC` (a text file renamed) or whose header and tensor table cannot
    be read (a truncated file), an architecture transformers' GGUF support does not map, a
    byte-level vocabulary whose pre-tokenizer cannot be reproduced
    (:func:`~blackbox_mia.tokenizers.gguf_pre.check_pre_tokenizer`), or (for ``weights``) a
    tensor quantization the ``gguf`` package cannot dequantize. Reads the header and tensor
    table only (a memory map; about 1 s for a 100 MB file).

    Returns:
        The vocabulary's pre-tokenizer type (``tokenizer.ggml.pre``), ``None`` when not stated.

    Raises:
        BlackboxMIAError: one of the above, with what is supported.
    """
    prefix = f"cannot load {what} {str(path)!r}"
    with path.open("rb") as file:
        if file.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
            raise BlackboxMIAError(f"{prefix}: not a GGUF file (it does not start with {GGUF_MAGIC.decode()}); pass a "
                                   "model directory, a hub name, or a .gguf file")
    needed = ("gguf", "accelerate") if weights else ("gguf",)
    missing = [package for package in needed if importlib.util.find_spec(package) is None]
    if missing:
        raise BlackboxMIAError(f"{prefix}: reading a GGUF file needs {' and '.join(missing)}: {GGUF_INSTALL}")
    from gguf import GGMLQuantizationType, GGUFReader
    from gguf.quants import dequantize
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    from .tokenizers.gguf_pre import check_pre_tokenizer  # not at the top: tokenizers imports this module

    try:
        reader = GGUFReader(path)
        architecture = reader.fields["general.architecture"].contents()
        tokenizer_model, pre = (reader.fields[key].contents() if key in reader.fields else None
                                for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre"))
    except (ValueError, IndexError, KeyError, OSError) as exc:
        raise BlackboxMIAError(f"{prefix}: not a readable GGUF file (truncated or damaged?): "
                               f"{' '.join(str(exc).split())}") from exc
    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        supported = sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"})  # sections, not models
        raise BlackboxMIAError(f"{prefix}: GGUF architecture {architecture!r} is not one transformers reads "
                               f"(supported: {', '.join(supported)})")
    check_pre_tokenizer(tokenizer_model, pre, prefix)
    if weights:
        kinds = {tensor.tensor_type for tensor in reader.tensors}
        unsupported = sorted(kind.name for kind in kinds if not _dequantizable(dequantize, kind))
        if unsupported:
            supported = [kind.name for kind in GGMLQuantizationType if _dequantizable(dequantize, kind)]
            raise BlackboxMIAError(f"{prefix}: its quantization {', '.join(unsupported)} cannot be dequantized by the "
                                   f"gguf package (supported: {', '.join(supported)})")
    return pre


def _dequantizable(dequantize, kind) -> bool:
    """Whether ``gguf.quants.dequantize`` reads tensors of quantization ``kind``: it is asked for
    one block of zero bytes (it raises ``NotImplementedError`` for a kind it does not know)."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES

    block, size = GGML_QUANT_SIZES[kind]
    try:
        dequantize(np.zeros((1, size), dtype=np.uint8), kind)
    except NotImplementedError:
        return False
    return True


@contextlib.contextmanager
def library_warnings_logged() -> Iterator[None]:
    """Within: Python warnings (transformers' and torch's deprecations, generation-config notes)
    are logged at DEBUG on this module's logger instead of printed, transformers' own logger
    shows errors only, and its progress bars (the "Loading weights" bar) are off; every setting
    is restored on exit."""
    verbosity = bars = None
    with contextlib.suppress(ImportError):
        from transformers.utils import logging as hf_logging

        verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        for warning in caught:
            LOG.debug("%s: %s", warning.category.__name__, warning.message)
    finally:
        if verbosity is not None:
            hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


UNMASKED_PADDING_NOTE = "We strongly recommend passing in an `attention_mask`"
"""transformers' note when a forward pass gets no attention mask, which the local backend
omits on purpose (right padding: exact values, and the faster fused kernel; see
``LocalBackend._states``)."""


class ToDebugLog(logging.Filter):
    """A filter for a library's logger: a record whose message starts with one of ``prefixes``
    is logged at DEBUG on this module's logger instead of being shown.

    Args:
        prefixes: the starts of the messages to route.
    """

    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(self.prefixes):
            LOG.debug("%s: %s", record.name, message)
            return False
        return True


def route_unmasked_padding_note() -> None:
    """Route :data:`UNMASKED_PADDING_NOTE` from ``transformers.modeling_utils`` to the DEBUG log
    (once per process: a second call adds nothing)."""
    logger = logging.getLogger("transformers.modeling_utils")
    if not any(isinstance(f, ToDebugLog) for f in logger.filters):
        logger.addFilter(ToDebugLog((UNMASKED_PADDING_NOTE,)))


def is_path(name: str) -> bool:
    """Whether ``name`` can only be a file system path, not a hub repository id (``NAME`` or
    ``ORG/NAME``): it starts with ``/``, ``.`` or ``~``, has more than one ``/``, a backslash, or
    ends with ``/``."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name or name.endswith("/")


def check_model_path(model: str) -> None:
    """Raise :class:`BlackboxMIAError` when ``model`` can only be a file system path
    (:func:`is_path`) and does not exist, instead of letting the hub reject it as a repository id."""
    if is_path(model) and not Path(model).expanduser().exists():
        raise BlackboxMIAError(f"local model path {model!r} does not exist")


def model_context(model_config, tokenizer) -> int:
    """Context length in tokens of a Hugging Face model: its config's
    ``max_position_embeddings`` / ``n_positions`` / ``seq_length``, else the tokenizer's
    ``model_max_length`` capped at 2,048."""
    for attr in MODEL_CONTEXT_FIELDS:
        value = getattr(model_config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return min(int(tokenizer.model_max_length), 2048)
