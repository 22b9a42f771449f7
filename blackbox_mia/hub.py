"""Loading Hugging Face models and tokenizers without waiting on an unreachable hub, and without
their libraries' warnings on the user's screen.

Why: ``from_pretrained("gpt2")`` on a machine without network retries the hub five times with
backoff (46-58 s measured) before it says the files are not cached, and ``HF_HUB_OFFLINE`` is
the only way to stop it. Here a hub name is looked up in the local cache first; only when it is
not there, and the hub answers a 3-second check, is it downloaded; otherwise one error at once
says what to do. Warnings that transformers and torch raise while loading go to this package's
logger (``logging.getLogger("blackbox_mia.hub")``, DEBUG) instead of flooding a notebook.
"""

from __future__ import annotations

import contextlib
import logging
import os
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from .types import BlackboxMIAError

LOG = logging.getLogger(__name__)
HUB_CHECK_TIMEOUT_S = 3.0  # seconds the reachability check of the hub waits for an answer
OFFLINE_ENV = "HF_HUB_OFFLINE"  # huggingface_hub's switch: never contact the hub
T = TypeVar("T")


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


def load_pretrained(load: Callable[..., T], name: str, what: str, local_files_only: bool = False, **kwargs) -> T:
    """``load(name, **kwargs)`` (a ``from_pretrained``) that never retries an unreachable hub.

    A directory that exists is loaded as it is. A hub name (``NAME`` or ``ORG/NAME``) is loaded
    from the local cache alone first; when it is not cached, it is downloaded only if neither
    ``local_files_only`` nor ``HF_HUB_OFFLINE`` forbids it and the hub answers
    (:func:`hub_reachable`). Library warnings raised meanwhile go to the log
    (:func:`library_warnings_logged`).

    Args:
        load: the loader, e.g. ``AutoTokenizer.from_pretrained``.
        name: a model directory or hub name.
        what: what is loaded, for the message (``"model"``, ``"tokenizer"``).
        local_files_only: never contact the hub.
        **kwargs: passed to ``load``.

    Raises:
        BlackboxMIAError: one line: not cached and offline, not cached and the hub unreachable,
            or the loader's own error (an ``OSError`` or ``ValueError``: missing files, a
            directory that is not a model...).
    """
    with library_warnings_logged():
        try:
            if Path(name).expanduser().exists():
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
        except (OSError, ValueError) as exc:
            raise BlackboxMIAError(f"cannot load {what} {name!r}: {' '.join(str(exc).split())}") from exc


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
