"""bench/chaos.py --quick (3 node processes, 5 faults: master kill -9, SIGSTOP, broker kill -9 and
restart, network cut) loses no acknowledged store write and no acknowledged queue message, and
leaves the store replicas identical. Timings are the benchmark's to report, not checked here.

A lost or doubled queue message, or replicas left different, is issue 23's open bug (a takeover at a
live master after a follower's cut, and splits while the broker is down, merged last-writer-wins):
the test then reports xfail with what was seen; a lost store write always fails it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "chaos.py"
BOUND = 600  # a bound for a stuck run, far above what one takes on a busy machine (~90 s)


@pytest.mark.mosquitto
@pytest.mark.slow
@pytest.mark.timeout(BOUND + 30)
def test_chaos_bench_quick_loses_no_acknowledged_write(tmp_path: Path) -> None:
    out_file = tmp_path / "chaos.json"
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(out_file)],
                         capture_output=True, text=True, timeout=BOUND)
    assert out_file.exists(), out.stdout + out.stderr
    result = json.loads(out_file.read_text())
    assert sum(result["faults"].values()) == 5
    assert set(result["faults"]) == {"kill_master", "stop", "broker", "cut"}
    assert result["store"]["acked"] > 0 and result["queue"]["acked"] > 0, result
    assert "lost / duplicated" in out.stdout
    assert result["store"]["lost"] == 0, result["store"]
    assert result["store"]["duplicated"] == 0, result["store"]
    known = {"replicas differ": not result["replicas_equal"], "queue messages lost": result["queue"]["lost"] > 0,
             "queue messages accepted twice": result["queue"]["duplicated"] > 0}
    if any(known.values()):
        # a mastership change at a live master (tests/store/test_elected_cut_live.py), or a split while
        # the broker is down, resolved by a merge (ConflictResolved): issue 23's open bug
        pytest.xfail(f"known (issue 23, split/merge under cuts and broker kills): "
                     f"{[k for k, v in known.items() if v]}; {result['conflicts']} merge conflicts")
    assert out.returncode == 0, out.stdout + out.stderr
