"""Text-only scorers: membership scores from generated text, for models that give no log-probs.

Closed chat APIs return at most the top-20 log-probs of generated tokens, never those of a
prompt, and some return none at all; there the log-prob scorers cannot run (or only at the
tracker's cost). A :class:`GenerationScorer` needs only the backend's ``generate`` feature: it
lists the generations it wants for a text (:meth:`GenerationScorer.requests`: prompts with their
token budget, temperature, sample count and seed), and scores the text from their answers
(:meth:`GenerationScorer.score_generations`), with the house sign convention (higher = more
likely a member). The runner (:mod:`blackbox_mia.text_only_runner`) batches the requests of every
text and scorer, so a cost estimate (``--dry-run``) counts exactly what is sent, and an API
backend caches every answer under its seed, so a rerun pays nothing.

Two forms: the *continuation* form (a base model or a completion endpoint
continues the text's own prefix, sent as token ids of the target's tokenizer, so there is no
retokenization drift) and the *instruction* form (a chat endpoint gets the paper's instruction
with the prefix as text). ``form="auto"`` takes the instruction form exactly when the target's
generations are conditional on a chat template (``chat``, from the backend's
``describe_generation()["condition"]``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..types import BlackboxMIAError, Generation, TokenLogprobs
from .base import Scorer
from .bounded import Bounded

if TYPE_CHECKING:
    from ..tokenizers import TokenCodec

FORMS = ("auto", "continuation", "instruction")
CONTINUATION, INSTRUCTION = FORMS[1], FORMS[2]
CONTINUE_INSTRUCTION = "Continue the following text exactly as it appears in its source, without any comment:\n\n"
"""The instruction form's prompt before a prefix, for SaMIA and CDD (ours: their papers study
base models only)."""


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to generate from, with its settings (one :meth:`Backend.agenerate` entry).

    Attributes:
        prompt: a text, or a tuple of token ids of the target's tokenizer (no BOS).
        max_new_tokens: at most this many generated tokens (>= 1).
        temperature: 0 = greedy (one answer, whatever ``n``); > 0 samples.
        n: samples (>= 1; 1 at temperature 0).
        seed: sample ``j`` uses seed ``seed + j`` (see :meth:`Backend.agenerate`).
    """

    prompt: str | tuple[int, ...]
    max_new_tokens: int
    temperature: float = 0.0
    n: int = 1
    seed: int = 0

    @property
    def settings(self) -> tuple[int, float, int, int]:
        """``(max_new_tokens, temperature, n, seed)``: requests that share them go in one call."""
        return self.max_new_tokens, self.temperature, self.n, self.seed

    @property
    def sent(self) -> int:
        """Requests an API backend sends for it: 1 at temperature 0, else ``n`` (one per seed)."""
        return 1 if self.temperature == 0 else self.n


@dataclass(frozen=True)
class TargetView:
    """What a text-only scorer knows of the target when it builds its prompts.

    Attributes:
        codec: the target's tokenizer (continuation prompts are its token ids).
        chat: the target's generations are conditional on a chat template (``form="auto"`` then
            takes the instruction form).
        window: the most tokens a prompt and its generation may hold together (the context
            minus the BOS), or ``None`` when unknown (an API endpoint).
    """

    codec: TokenCodec
    chat: bool = False
    window: int | None = None


class GenerationScorer(Scorer):
    """Base class of the text-only scorers (frozen dataclasses of their parameters).

    Subclasses implement :meth:`requests` and :meth:`score_generations`; :meth:`score` (the
    log-prob interface) is refused, as these scorers read no log-prob.
    """

    needs_logprobs: ClassVar[bool] = False

    @abstractmethod
    def requests(self, text: str, target: TargetView) -> list[GenerationRequest]:
        """The generations :meth:`score_generations` reads for ``text`` (every prompt and its
        budget fit ``target.window``).

        Raises:
            BlackboxMIAError: a text this scorer cannot use (too short to split, not in the
                format the method needs); raised before anything is generated.
        """

    @abstractmethod
    def score_generations(self, text: str, target: TargetView, generations: Sequence[Sequence[Generation]]) -> Bounded:
        """The membership score of ``text``: ``generations[r]`` holds the ``n`` answers of
        ``self.requests(text, target)[r]`` (one at temperature 0). Exact (no interval)."""

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        """Refused: a text-only scorer reads generations (the runner routes it by
        :attr:`needs_logprobs`).

        Raises:
            BlackboxMIAError: always.
        """
        raise BlackboxMIAError(f"scorer {self.label!r} scores generations, not log-probs")


def check_form(name: str, form: str) -> None:
    """Raise :class:`BlackboxMIAError` (naming scorer ``name``) unless ``form`` is one of :data:`FORMS`."""
    if form not in FORMS:
        raise BlackboxMIAError(f"scorer {name!r}: form must be one of {', '.join(FORMS)}, got {form!r}")


def use_instruction(form: str, chat: bool) -> bool:
    """Whether a scorer sends its instruction form: ``form`` is ``instruction``, or ``auto`` on a
    target whose generations are conditional on a chat template (``chat``)."""
    return form == INSTRUCTION or (form == "auto" and chat)


def fit_window(name: str, prompt: Sequence[int], budget: int, target: TargetView) -> tuple[int, ...]:
    """``prompt`` (token ids) cut to its last ``window − budget`` tokens when with its token
    ``budget`` it exceeds ``target.window`` (a short-context model was trained on windows of its
    texts, so the text just before what it must generate matters most); unchanged when the window
    is unknown.

    Raises:
        BlackboxMIAError: a budget that alone fills the window (naming scorer ``name``).
    """
    if target.window is None:
        return tuple(prompt)
    if budget >= target.window:
        raise BlackboxMIAError(f"scorer {name!r}: the answer needs {budget} tokens, more than the target's context holds")
    return tuple(prompt[-(target.window - budget):])


@dataclass(frozen=True)
class Halves:
    """A text cut into a prefix (the prompt) and the suffix it should be continued with.

    Attributes:
        prefix_ids, suffix_ids: token ids of the target's tokenizer.
        prefix, suffix: their texts (the ids decoded).
    """

    prefix_ids: tuple[int, ...]
    suffix_ids: tuple[int, ...]
    prefix: str
    suffix: str


def split_halves(name: str, text: str, target: TargetView, fraction: float, max_suffix: int) -> Halves:
    """Cut ``text`` after ``round(fraction · T)`` of its T tokens (at least one token on each
    side); the suffix is the next at most ``max_suffix`` tokens. A text longer than
    ``target.window`` tokens is cut to its first ``window`` tokens first (a model of a short
    context was trained on windows of its texts), so prompt and suffix fit the context.

    Raises:
        BlackboxMIAError: a text of fewer than two tokens (naming the scorer ``name``).
    """
    codec = target.codec
    ids = codec.encode(text)[: target.window]
    if len(ids) < 2:
        raise BlackboxMIAError(f"scorer {name!r}: a text of {len(ids)} token(s) cannot be cut into a prefix and a suffix")
    cut = min(max(1, round(fraction * len(ids))), len(ids) - 1)
    prefix, suffix = tuple(ids[:cut]), tuple(ids[cut : cut + max_suffix])
    return Halves(prefix, suffix, codec.decode(list(prefix)), codec.decode(list(suffix)))


@dataclass(frozen=True)
class SampledContinuation(GenerationScorer):
    """Base of the scorers that sample continuations of a text's first part (SaMIA, CDD): the
    fields, ranges and checks they share; each subclass sets its paper's defaults.

    Parameters:
        n: samples per text (>= 1).
        temperature: sampling temperature (> 0, at most 2).
        prefix: fraction of the text's tokens given as the prompt (0 < prefix < 1).
        seed: sample ``j`` uses seed ``seed + j``.
        form: ``continuation`` (the prefix as token ids), ``instruction``
            (:data:`CONTINUE_INSTRUCTION` and the prefix as text), or ``auto`` (instruction on
            chat targets).

    Raises:
        BlackboxMIAError: a bad ``form``.
    """

    ranges: ClassVar[dict] = {"n": {"at_least": 1}, "temperature": {"above": 0.0, "at_most": 2.0},
                              "prefix": {"above": 0.0, "below": 1.0}, "seed": {"at_least": 0}}

    n: int = 10
    temperature: float = 1.0
    prefix: float = 0.5
    seed: int = 0
    form: str = "auto"

    def __post_init__(self) -> None:
        check_form(self.name, self.form)

    def prompt(self, halves: Halves, target: TargetView) -> str | tuple[int, ...]:
        """The prompt of ``halves``: its prefix as token ids, or (instruction form)
        :data:`CONTINUE_INSTRUCTION` and the prefix as text."""
        return CONTINUE_INSTRUCTION + halves.prefix if use_instruction(self.form, target.chat) else halves.prefix_ids
