"""Ctrl-C on a long command: `roofline plan` (a worker pool, and in this process) ends within a few seconds, exit
130, one line and no traceback; progress and an estimate come first, on stderr."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

PLAN = [sys.executable, "-m", "roofline", "plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
        "--workload", "sharegpt-chat", "--slo-ttft-s", "2", "--slo-tpot-s", "0.08", "--target-qps", "10",
        "--tensor-parallel-sizes", "1", "--max-num-seqs", "64,128,256", "--num-requests", "300"]


@pytest.mark.parametrize("workers, whole_group", [("2", True), ("1", False)])
def test_sigint_ends_plan_within_5_s_with_exit_130_and_no_traceback(tmp_path, workers: str,
                                                                     whole_group: bool) -> None:
    """`whole_group`: the signal reaches every process of the group, as a terminal's Ctrl-C does (the workers
    too); else only the main process, as `kill -INT`."""
    proc = subprocess.Popen([*PLAN, "--workers", workers, "--out", str(tmp_path / "plan")], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True, start_new_session=True)
    assert proc.stderr is not None
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the estimate, then the first round: the searches are running
        line = proc.stderr.readline()
        lines.append(line)
        if "round 1/4" in line or not line:
            break
    assert any("about" in line and "simulations" in line for line in lines), lines
    assert any("one simulation took" in line for line in lines), lines
    time.sleep(1.0)
    sent = time.monotonic()
    if whole_group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    try:
        rc = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("roofline plan still running 5 s after SIGINT") from None
    elapsed = time.monotonic() - sent
    err = proc.stderr.read()
    assert rc == 130, err
    assert "Traceback" not in err and "roofline plan: interrupted" in err
    assert elapsed < 5


def test_plan_dry_run_prints_the_space_and_an_estimate_and_writes_nothing(tmp_path, capsys) -> None:
    from roofline.cli import main

    out = tmp_path / "plan"
    assert main(["plan", *PLAN[4:], "--num-requests", "40", "--out", str(out), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "h100-sxm TP1" in captured.out and "max_num_seqs 64,128,256: fits" in captured.out
    assert "3 configurations" in captured.err and "one simulation took" in captured.err
    assert not out.exists()
