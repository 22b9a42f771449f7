"""``auto``: the cheapest strategy the probe allows, per position, and the set of every
per-position strategy it chooses from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..capabilities import Capabilities
from ..endpoint import Endpoint
from .flips import Bisect
from .postbias import PostBias
from .strategies import Estimate, Forced, Position, Strategy, TopN

if TYPE_CHECKING:
    from .config import TrackerConfig

FALLBACKS = ("postbias", "bisect")  # what ``auto`` tries, in order, for a target not in the top-n
ONE_REQUEST = ("forced", "postbias")  # what ``auto`` asks first, listed or not: one request a target


class Auto(Strategy):
    """The cheapest available: ``forced``, else ``postbias`` (one request a target, listed or
    not); else the listed value (``topn``), else ``bisect``; else the top-n bound.

    Args:
        parts: the per-position strategies by name (as :func:`strategy_set` builds them).
    """

    name = "auto"

    def __init__(self, endpoint: Endpoint, caps: Capabilities, config: TrackerConfig, parts: Mapping[str, Strategy]):
        super().__init__(endpoint, caps, config)
        self.parts = parts
        self.available = caps.strategies()

    async def resolve(self, position: Position) -> Estimate:
        for name in ONE_REQUEST:
            if name in self.available:
                return await self.parts[name].resolve(position)
        return await super().resolve(position)

    async def measure(self, position: Position) -> Estimate:
        fallback = next((s for s in FALLBACKS if s in self.available), "topn")
        return await self.parts[fallback].measure(position)


def strategy_set(endpoint: Endpoint, caps: Capabilities, config: TrackerConfig) -> dict[str, Strategy]:
    """Every per-position strategy by name (``topn``, ``forced``, ``postbias``, ``bisect``, and
    ``auto`` over those ``caps`` allows), sharing one endpoint, record and configuration."""
    parts: dict[str, Strategy] = {cls.name: cls(endpoint, caps, config) for cls in (TopN, Forced, PostBias, Bisect)}
    return {**parts, "auto": Auto(endpoint, caps, config, parts)}
