"""How long a thread waits for CPython's GIL after a blocking call returns while another thread of the process polls
as vLLM's engine core does while its Worker computes (docs/benchmark-history/2026-11-30f-serve12.md).

vLLM 0.32's multiprocessing executor (forced on CPU, `vllm/platforms/cpu.py`) waits for each step's output in
`MessageQueue.acquire_read` (`vllm/distributed/device_communicators/shm_broadcast.py`): while less than `busy_loop_s`
(1 s) has passed since its last read, `SpinCondition.wait` calls `vllm.distributed.utils.sched_yield()`
(`os.sched_yield()` on Python >= 3.11.1, which releases the GIL around the system call) and checks the shared-memory
flag again, in Python. The engine core's input and output threads block in ZMQ's poll / recv and `queue.get` (the GIL
released) and must take it back before their next bytecode. CPython's GIL (3.11: Python/ceval_gil.h; 3.12+:
Python/ceval_gil.c, `take_gil`): a thread that finds the GIL taken waits on its condition variable for the switch
interval (`sys.setswitchinterval`, 5 ms by default) and only then asks the holder to drop it; a holder that releases
and re-takes it at once (the spin) usually takes it back first.

Here, in one process pinned to one core: a "spinner" thread runs that loop (a flag in memory checked in Python,
`os.sched_yield()`), a "waker" thread blocks in `select` on a socket pair, and a third party stands for the Worker
(`--worker`: a busy process on the same core, as vLLM's Worker shares the engine core's core on this host). Every
`--period-ms` another process (the API server's end of the socket) writes its send time; the waker's
delay is from that send to its first bytecode after `select` returned (both CLOCK_MONOTONIC). Modes: "spin" (the
spinner polls), "idle" (the spinner blocks in a queue's get, as the busy loop does with nothing to run), for each
switch interval in --intervals-ms.

    taskset -c 1 python benchmarks/ground_truth/gil_reacquire.py --out $OUT/gil.json --wakes 400 --worker

Prints and writes per (mode, interval): the wake delay's median, p90, p99 and mean in ms, and the spinner's turns
per second (0 when idle).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import select
import socket
import statistics
import sys
import threading
import time


def spinner(stop: threading.Event, flag: list[int]) -> None:
    """shm_broadcast's reader loop, as near as Python goes: check a flag (`check()`), yield (`SpinCondition.wait`)."""
    while not stop.is_set():
        if flag[0]:
            flag[0] = 0
        flag[1] += 1  # the loop's turns, to show it ran
        time.monotonic()  # SpinCondition.wait reads the clock against busy_loop_s each time
        os.sched_yield()


def idler(stop: threading.Event, q: "queue.Queue[int]") -> None:
    """The busy loop with nothing to run: blocked in `input_queue.get` (the GIL released)."""
    while not stop.is_set():
        try:
            q.get(timeout=0.1)
        except queue.Empty:
            pass


def sender(sock_fd: int, wakes: int, period_s: float) -> None:
    """Another process (the API server's side of the ZMQ socket): a byte every period; the send time goes with it."""
    sock = socket.socket(fileno=sock_fd)
    for _ in range(wakes):
        time.sleep(period_s)
        sock.send(time.monotonic().hex().encode().ljust(32))
    sock.close()


def burn(stop_at: float) -> None:
    """The Worker's forward passes: CPU-bound work on the same core."""
    x = 0
    while time.monotonic() < stop_at:
        x += 1


def measure(mode: str, interval_s: float, wakes: int, period_s: float, worker: bool) -> tuple[list[float], int]:
    sys.setswitchinterval(interval_s)
    ours, theirs = socket.socketpair()
    stop = threading.Event()
    flag = [0, 0]
    other = (threading.Thread(target=spinner, args=(stop, flag)) if mode == "spin"
             else threading.Thread(target=idler, args=(stop, queue.Queue())))
    delays: list[float] = []

    def waker() -> None:
        for _ in range(wakes):
            select.select([ours], [], [])  # blocks with the GIL released, as zmq's poll does
            now = time.monotonic()          # the first bytecode after the GIL is taken back
            sent = float.fromhex(ours.recv(32).decode().strip())
            delays.append(now - sent)

    ctx = multiprocessing.get_context("fork")
    burner = ctx.Process(target=burn, args=(time.monotonic() + wakes * period_s + 5,)) if worker else None
    send = ctx.Process(target=sender, args=(theirs.fileno(), wakes, period_s))
    if burner:
        burner.start()
    other.start()
    wake = threading.Thread(target=waker)
    wake.start()
    send.start()
    wake.join()
    stop.set()
    other.join()
    send.join()
    if burner:
        burner.terminate()
        burner.join()
    ours.close()
    theirs.close()
    sys.setswitchinterval(0.005)
    return delays, flag[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--wakes", type=int, default=400)
    parser.add_argument("--period-ms", type=float, default=7.0)
    parser.add_argument("--intervals-ms", default="5,0.5")
    parser.add_argument("--worker", action="store_true", help="a busy process on the same core (vLLM's Worker)")
    parser.add_argument("--rounds", type=int, default=2, help="each (mode, interval) this many times, interleaved")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    turns: dict[str, int] = {}
    for _ in range(args.rounds):
        for mode in ("spin", "idle"):
            for interval in [float(x) / 1e3 for x in args.intervals_ms.split(",")]:
                key = f"{mode} {1e3 * interval:g} ms"
                delays, n = measure(mode, interval, args.wakes, args.period_ms / 1e3, args.worker)
                results.setdefault(key, []).extend(delays)
                turns[key] = turns.get(key, 0) + n
    rows = {}
    for key, values in results.items():
        ms = sorted(1e3 * v for v in values)
        rows[key] = {"wakes": len(ms), "median": round(statistics.median(ms), 3),
                     "p90": round(ms[int(0.9 * len(ms))], 3), "p99": round(ms[int(0.99 * len(ms))], 3),
                     "mean": round(statistics.mean(ms), 3),
                     "spinner_turns_per_s": round(turns[key] / (args.rounds * args.wakes * args.period_ms / 1e3))}
        print(key, rows[key])
    record = {"python": sys.version.split()[0], "affinity": sorted(os.sched_getaffinity(0)), "worker": args.worker,
              "period_ms": args.period_ms, "loadavg": open("/proc/loadavg").read().split()[:3], "rows": rows}
    with open(args.out, "w") as f:
        f.write(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
