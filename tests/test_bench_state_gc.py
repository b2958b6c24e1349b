"""bench/state_gc.py runs and writes its table (small sizes; the figures are the benchmark's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_state_gc_bench_runs_and_writes_its_rows(tmp_path: Path) -> None:
    out = tmp_path / "state_gc.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "state_gc.py"), "--keys", "500,2000", "--repeat", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=120, check=True)
    assert "x baseline" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["keys"] for r in rows] == [500, 2000]
    assert all(r["state_ms"] > 0 and r["baseline_ms"] > 0 and r["apply_us"] > 0 for r in rows)
