"""Reading a subscription in endpoint tests: take ``n`` messages, or check that nothing more comes."""

from __future__ import annotations

import anyio
import pytest

from broker_mqtt import Message, Subscription


async def take(sub: Subscription, n: int, timeout: float = 10) -> list[Message]:
    """The next ``n`` messages of ``sub``; fails the test after ``timeout`` s."""
    out: list[Message] = []
    with anyio.fail_after(timeout):
        async for msg in sub:
            out.append(msg)
            if len(out) == n:
                break
    return out


async def nothing_more(sub: Subscription, wait: float = 0.3) -> None:
    """Fail the test if ``sub`` gets a message within ``wait`` s."""
    with anyio.move_on_after(wait):
        msg = await sub.get()
        pytest.fail(f"unexpected message {msg!r}")
