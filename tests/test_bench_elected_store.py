"""bench/elected_store.py --quick runs to completion and writes every row (a smoke run: no figure is
checked, only that each case was measured; the speed itself is the benchmark's to report)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "elected_store.py"
BOUND = 600  # a bound for a stuck run, far above what one takes on a busy machine (~40 s on a quiet one)


@pytest.mark.mosquitto
@pytest.mark.slow
@pytest.mark.timeout(BOUND + 30)
def test_elected_store_bench_quick(tmp_path: Path) -> None:
    out_file = tmp_path / "elected_store.json"
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out_file)],
                         capture_output=True, text=True, timeout=BOUND)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "acked/s" in out.stdout and "snapshot join" in out.stdout
    result = json.loads(out_file.read_text())
    assert result["master_clone"]["mean"] > 0
    cases = {(r["durability"], r["master_here"], r["inflight"]) for r in result["elected"]}
    assert cases == {(d, True, c) for d in ("one", "all", "master") for c in (1, 16, 256)} \
        | {("one", False, c) for c in (1, 16, 256)}
    assert all(r["n"] > 0 and r["rate"] > 0 and r["ratio"] > 0 for r in result["elected"])
    for r in result["elected"]:  # every acknowledged put reached every replica
        assert r["keys_check"]["replicas"] == [r["keys_check"]["written"]] * 3, r
    assert result["queue"]["accepted_per_s"] > 0
    cpu = result["queue"]["cpu_us_per_msg"]  # (from /proc: Linux, as CI)
    assert set(cpu) == {"publisher (master)", "standby", "4 consumers", "total (without mosquitto)"}, cpu
    assert all(us > 0 for us in cpu.values()), cpu
    assert {(r["joiner_backend"], r["master_resident"]) for r in result["joins"]} == {
        ("memory", "memory"), ("sqlite", "memory"), ("disk", "disk")}
    for join in result["joins"]:
        assert "error" not in join, join
        assert join["via"] == "snapshot" and join["join_s"] > 0 and join["joiner_peak_mb"] > 0
