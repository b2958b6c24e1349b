"""Every example in examples/ runs to completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


# A bound for a stuck example, far above what one takes on a busy machine (the Spark one starts a JVM:
# ~25 s on a quiet 2-core machine); a bound that a slow machine can reach would make a flaky test.
BOUND = 600


@pytest.mark.mosquitto
@pytest.mark.timeout(BOUND + 30)
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    if path.name.startswith("spark_"):
        pytest.importorskip("pyspark", reason="needs the spark extra")
        pytest.importorskip("pyarrow", reason="needs the spark extra")
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=BOUND)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip(), "an example should show what it did"
