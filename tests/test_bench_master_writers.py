"""bench/master_writers.py runs and writes its table (small sizes; the figures are the benchmark's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_master_writers_bench_runs_and_writes_its_rows(tmp_path: Path) -> None:
    out = tmp_path / "master_writers.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "master_writers.py"), "--writers", "5,50",
                           "--rounds", "50", "--out", str(out)], capture_output=True, text=True, timeout=120,
                          check=True)
    assert "x baseline" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["writers"] for r in rows] == [5, 50]
    assert all(r["us_per_round"] > 0 and r["rounds"] == 50 for r in rows) and rows[0]["ratio"] == 1.0
