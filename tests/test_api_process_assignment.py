"""benchmarks/ground_truth/api_process_assignment.py: which API-server process took each request of a traced run
(the `add` events' pid, by request index), the connections' accept order (the `conn` events' pid and port, each
request's port on its `asgi` event), and the sequences' statistics."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "ground_truth"))

import api_process_assignment as assignment  # noqa: E402


def test_the_sequence_statistics_count_changes_runs_and_the_distance_from_round_robin() -> None:
    stats = assignment.sequence_stats([0, 1, 1, 0, 0, 1], 2)
    assert stats["per_process"] == [3, 3]
    assert (stats["changes"], stats["pairs"], stats["longest_run"]) == (3, 5, 2)
    assert stats["off_round_robin"] == 2  # against 0 1 0 1 0 1: the 3rd and 4th differ
    assert assignment.sequence_stats([1, 0, 1, 0], 2)["off_round_robin"] == 0  # round robin from process 1


def test_accepts_read_who_took_each_connection_and_the_ties() -> None:
    assert assignment.accept_stats([0, 1, 1, 0, 0, 1], 2) == {
        "to_least_loaded": 6, "ties_to_last_acceptor": 2, "ties_to_another": 1}
    assert assignment.accept_stats([0, 0, 1], 2)["to_least_loaded"] == 2  # the second: process 0 had more


def test_a_runs_requests_are_matched_to_their_process_and_connection(tmp_path: Path) -> None:
    """Two requests of client "ab" on two connections (ports 5001, 5002) accepted by pids 20 and 10; an older
    connection with port 5001 (another run's) is not theirs."""
    events = [["conn", 1.0, 10, 5001], ["conn", 9.0, 20, 5002], ["conn", 9.1, 10, 5001],
              ["asgi", "bench-ab-0", 9.5, 5002], ["asgi", "bench-ab-1", 9.6, 5001],
              ["add", "cmpl-bench-ab-0-0-x", 9.7, 20], ["add", "cmpl-bench-ab-1-0-y", 9.8, 10]]
    log = tmp_path / "timeline-a2.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    runs = [{"name": "burst-a2", "api_server_count": 2, "result": {"start_times": [9.4, 9.4]}}]
    assert assignment.assignments(log, runs) == {"burst-a2": [1, 0]}  # pids numbered from the lowest
    accepted = assignment.accepts(log, runs)["burst-a2"]
    assert accepted["connections"] == 2
    assert accepted["accepted"] == "10"  # at 9.0 s pid 20, at 9.1 s pid 10
    assert accepted["request_connection_rank"] == [0, 1]
