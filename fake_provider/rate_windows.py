"""What the fake provider's rate limits decide for one request, and the sliding token windows
behind its token limits (state.py holds the windows; the APIs send the decision's headers)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["RateDecision", "TokenSlot", "TokenWindow"]


@dataclass(frozen=True)
class RateDecision:
    allowed: bool
    limit: int | None
    """The requests limit; None when only token limits are set."""
    remaining: int
    reset: str
    retry_after: int
    token_headers: tuple[tuple[str, str], ...] = ()
    slots: tuple[tuple[str, TokenSlot], ...] = ()
    """("input" | "output", entry) this request holds in the token windows (settled later)."""

    def headers(self) -> list[tuple[str, str]]:
        requests = []
        if self.limit is not None:
            requests = [
                ("anthropic-ratelimit-requests-limit", str(self.limit)),
                ("anthropic-ratelimit-requests-remaining", str(self.remaining)),
                ("anthropic-ratelimit-requests-reset", self.reset),
            ]
        return [*requests, *self.token_headers]


class TokenSlot:
    """One request's tokens in a token window; corrected to the real count after the answer."""

    __slots__ = ("at", "live", "owner", "tokens")

    def __init__(self, at: float, tokens: int, owner: TokenWindow) -> None:
        self.at, self.tokens, self.owner, self.live = at, tokens, owner, True


class TokenWindow:
    """Tokens admitted in the last ``seconds``: a sliding window with a running sum."""

    def __init__(self) -> None:
        self.slots: deque[TokenSlot] = deque()
        self.used = 0

    def trim(self, now: float, seconds: float) -> None:
        while self.slots and self.slots[0].at <= now - seconds:
            slot = self.slots.popleft()
            slot.live = False
            self.used -= slot.tokens

    def wait_for(self, tokens: int, limit: int, now: float, seconds: float) -> float:
        """Seconds until ``tokens`` more fit under ``limit`` as the oldest entries leave."""
        excess, freed = self.used + tokens - limit, 0
        for slot in self.slots:
            freed += slot.tokens
            if freed >= excess:
                return slot.at + seconds - now
        return seconds

    def admit(self, at: float, tokens: int) -> TokenSlot:
        slot = TokenSlot(at, tokens, self)
        self.slots.append(slot)
        self.used += tokens
        return slot

    def settle(self, slot: TokenSlot, tokens: int) -> None:
        # A slot that already left the window (or belongs to one from before a reset) no longer
        # counts here.
        if slot.live and slot.owner is self:
            self.used += tokens - slot.tokens
        slot.tokens = tokens
