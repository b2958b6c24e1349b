"""asyncactor tests run in simulated time: anyio's trio backend with trio's MockClock."""

import pytest
import trio.testing


@pytest.fixture
def anyio_backend():
    return ("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)})
