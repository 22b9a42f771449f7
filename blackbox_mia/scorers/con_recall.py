"""Con-ReCall (Wang et al. 2024, "Con-ReCall: Detecting Pre-training Data in LLMs via Contrastive
Decoding", arXiv 2409.03363)."""

from __future__ import annotations

from dataclasses import dataclass

from ..types import TokenLogprobs
from .base import Need, Scorer, register_scorer
from .bounded import Bounded, BoundedValues
from .recall import PREFIX_SEPARATOR, conditional_mean, prefix_shots, prefix_text


@register_scorer
@dataclass(frozen=True)
class ConReCaLL(Scorer):
    """score = (LL(x | P_non-member) − γ · LL(x | P_member)) / LL(x), LL = mean lp_i over the
    tokens of x (nats/token, < 0).

    Wang et al. 2024, the membership score s(x, M) = [LL(x | P_non-member) − γ · LL(x | P_member)]
    / LL(x) of their method section; the authors' code (github.com/WangCheng0116/CON-RECALL,
    ``run.py``, ``inference``: ``(ll_nonmember - gamma * ll_member) / ll``, ``ll`` = −(mean
    token loss)) ranks higher = member, as here.
    γ = 0 would be ReCaLL (:class:`~.recall.ReCaLL`): a non-member prefix lowers a member's
    log-likelihood more than a non-member's; a member prefix barely moves a member's, and
    subtracting it contrasts the two shifts. Each LL(x | P) is read as ReCaLL reads it
    (:func:`~.recall.conditional_mean`: x's own tokens after ``P + "\\n\\n"``, which must be x's
    tokens); the authors join the shots with nothing and concatenate token ids instead.

    Parameters: ``prefix`` and ``member_prefix``, files (or shipped datasets) of known
    non-members and known members of the target, whose first ``shots`` texts make P_non-member
    and P_member (:func:`~.recall.prefix_text`; an item labelled the other way is refused); both
    must be kept out of the audit's items (:meth:`conditioning_texts`). ``gamma`` > 0: the
    authors' code reports γ in 0.1 ... 1.0 and fixes none; 0.5 is Fast-MIA's default.

    Raises:
        BlackboxMIAError: a missing, unreadable, empty, too short or wrongly labelled prefix
            file (:func:`~.recall.prefix_shots`), or x tokenized differently after a prefix.
    """

    name = "con_recall"
    prefix: str = ""
    member_prefix: str = ""
    shots: int = 1
    gamma: float = 0.5
    ranges = {"shots": {"at_least": 1}, "gamma": {"above": 0.0}}

    def needs(self, text: str) -> list[Need]:
        return [Need(prefix_text(spec, self.shots, self.name, label) + PREFIX_SEPARATOR + text)
                for label, spec in enumerate((self.prefix, self.member_prefix))]

    def conditioning_texts(self) -> tuple[str, ...]:
        return prefix_shots(self.prefix, self.shots, self.name) + prefix_shots(self.member_prefix, self.shots, self.name, 1)

    def score(self, text: str, lp: TokenLogprobs, aux: list[TokenLogprobs]) -> Bounded:
        nonmember, member = (conditional_mean(self.name, text, lp, conditioned) for conditioned in aux)
        return (nonmember - self.gamma * member) / BoundedValues.of(lp).mean()
