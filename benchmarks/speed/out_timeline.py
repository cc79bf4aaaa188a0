"""Where `roofline simulate --out` spends its time, per process: the README's workload run in this process with stamps
(wall from `time.monotonic()`, the calling thread's CPU, the process's minor page faults) around the `--out`
pipeline's calls in the simulation's process and in the writer process it forks (roofline/sim/outputs.py).

    python benchmarks/speed/out_timeline.py                       # 10,000 requests
    python benchmarks/speed/out_timeline.py --num-requests 100000 --no-out   # the same stamps without --out

Printed per process: each stamped call's count, wall and CPU seconds in all, when it first started and last ended
(seconds from this script's start), then the process's CPU, minor faults and peak RSS. The figures to read: the
simulation's loop (`run_simulation`) against the same without `--out`, its hand-overs (`_ForkedWriter.send`), its
wait for the writer at the end (`_ForkedWriter.finish`), and the writer's table building (`steps_table`) and Parquet
encoding (`write_table`) with the time its last part ended. A stamp costs ~2 us; the figures of a loaded machine are
no measurements (state the load and the time of day with them).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

START = time.monotonic()
STAMPS: list[tuple[int, str, float, float, float]] = []  # (pid, call, started at s, wall s, CPU s)


def stamped(owner: Any, attr: str, name: str) -> None:
    """Replace `owner.attr` (a function or method) with one that stamps each call as `name`."""
    original: Callable[..., Any] = getattr(owner, attr)

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.monotonic(), time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            STAMPS.append((os.getpid(), name, t0 - START, time.monotonic() - t0, time.thread_time() - c0))

    setattr(owner, attr, call)


def usage() -> dict[str, float]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "minor_faults": ru.ru_minflt, "peak_rss_mb": ru.ru_maxrss / 1024}


def report(path: Path) -> None:
    """This process's stamps and usage, as JSON into `path`."""
    path.write_text(json.dumps({"pid": os.getpid(), "stamps": STAMPS, "usage": usage()}))


def show(title: str, record: dict[str, Any]) -> None:
    calls: dict[str, list[float]] = {}
    for _, name, at, wall, cpu in record["stamps"]:
        entry = calls.setdefault(name, [0, 0.0, 0.0, at, 0.0])
        entry[0] += 1
        entry[1] += wall
        entry[2] += cpu
        entry[4] = at + wall
    print(f"{title} (pid {record['pid']})")
    for name, (count, wall, cpu, first, last) in calls.items():
        print(f"  {name:34s} {count:4d}x  wall {wall:7.3f} s  CPU {cpu:7.3f} s  from {first:6.3f} to {last:6.3f} s")
    u = record["usage"]
    print(f"  process: CPU {u['cpu_s']:.3f} s, {u['minor_faults']:,} minor faults, peak RSS {u['peak_rss_mb']:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument("--no-out", action="store_true", help="the run without --out (the loop's stamps alone)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import roofline.commands.simulate as simulate
    import roofline.sim.outputs as outputs
    import roofline.sim.recorder as recorder
    from roofline.cli import main as cli

    for owner, attr, name in ((simulate, "run_simulation", "run_simulation (the loop)"),
                              (outputs.StepTraceStream, "__init__", "StepTraceStream (the fork)"),
                              (recorder.Recorder, "stream_steps", "Recorder.stream_steps"),
                              (outputs._ForkedWriter, "send", "_ForkedWriter.send"),
                              (outputs._ForkedWriter, "finish", "_ForkedWriter.finish (the wait)"),
                              (outputs, "write_csv", "write_csv"),
                              (simulate, "load_over_time", "load_over_time"),
                              (simulate, "bench_metrics", "bench_metrics")):
        stamped(owner, attr, name)
    tmp = Path(tempfile.mkdtemp(prefix="out-timeline-"))
    child_file = tmp / "writer.json"
    writer_of = outputs.StepTraceStream._writer

    def writer(self: Any) -> Any:  # (in the writer process: its calls stamped once steps_file is imported there)
        if self._local is None:
            from roofline.sim import steps_file

            stamped(steps_file, "steps_table", "steps_table")
            stamped(steps_file.pq.ParquetWriter, "write_table", "ParquetWriter.write_table")
        return writer_of(self)

    close = outputs.StepTraceStream.close

    def close_and_report(self: Any, summary: dict[str, object] | None = None) -> None:
        close(self, summary)
        if self._in_child:
            report(child_file)

    outputs.StepTraceStream._writer = writer  # type: ignore[method-assign]
    outputs.StepTraceStream.close = close_and_report  # type: ignore[method-assign]
    argv = ["simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
            "--request-rate", "10", "--num-requests", str(args.num_requests)]
    with open(os.devnull, "w") as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            cli(argv if args.no_out else [*argv, "--out", str(tmp / "out")])
        finally:
            sys.stdout = stdout
    report(tmp / "main.json")
    print(f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {' '.join(open('/proc/loadavg').read().split()[:3])}"
          if Path("/proc/loadavg").exists() else "")
    show("the simulation's process", json.loads((tmp / "main.json").read_text()))
    if child_file.exists():
        show("the writer process", json.loads(child_file.read_text()))
    print(f"(this script's end {time.monotonic() - START:.3f} s)")


if __name__ == "__main__":
    main()
