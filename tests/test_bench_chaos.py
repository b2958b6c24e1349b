"""bench/chaos.py --quick (3 node processes, 5 faults: master kill -9, SIGSTOP, broker kill -9 and
restart, network cut) loses no acknowledged store write and no acknowledged queue message, applies
or accepts none twice, and leaves the store replicas identical. Timings are the benchmark's to
report, not checked here.

A queue message counts as lost unless it was accepted (an ACCEPTED line) or dead-lettered; a
message whose accept raised (its outcome unknown: it may have gone through, printing nothing) is
left out of the count (``lost_after_a_failed_accept``). Until 2026-11-29 a lost or doubled queue
message was reported as xfail, a residual seen once after a broker crash: a message acknowledged
just before it and never delivered again while the run drained, its consumer alive. A healed
split's merge could leave a message acquired by an owner without a lease, which nothing took back
(fixed: ``QueueIndex.expired_owners``); 35 quick runs that day (seeds 1..35) lost none and doubled
none, so the check is strict.

Until issue 23's fixes a lost or doubled queue message, or replicas left different, happened here:
a follower cut off or paused took a live master's tag, tagged itself alone or claimed on a stale
history, and the histories were merged (tests/store/test_elected_cut_live.py,
tests/actor/test_core.py, tests/store/test_elected_replication.py have those scenarios)."""

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
    assert result["replicas_equal"], result["replica_differences"]
    queue = result["queue"]
    assert queue["lost"] - queue["lost_after_a_failed_accept"] == 0, queue
    assert queue["duplicated"] == 0, queue
    assert out.returncode == 0, out.stdout + out.stderr
