"""vLLM 0.32's accept path with one and two API-server processes, without a model: the CPU each new connection costs
the server processes on their shared core, against a request on a kept-alive connection.

With `--api-server-count 1` vLLM serves its socket through uvicorn's own server (`uvicorn.Server.startup` ->
`loop.create_server(sock=...)`: uvloop's listening handle, which accepts every queued connection in one wake-up).
With more (`vllm/entrypoints/cli/serve.py` `run_multi_api_server` -> `setup_server(reuse_port=True)`: ONE socket,
inherited by every `ApiServer_<i>` process, `vllm/v1/utils.py` `APIServerProcessManager`), each process serves it
with `vllm/entrypoints/launchers/launcher.py` `NoSignalServer._accept`: per connection it registers the socket with
its loop (`_readable`: `loop.add_reader`, awaited, `loop.remove_reader`), publishes its open connections in a shared
array, defers to a less-loaded peer by `asyncio.sleep(0.001)` up to 5 times, then `sock.accept()` (the peer may have
taken it: BlockingIOError, round again) and starts the connection in a task of its own (`loop.connect_accepted_socket`).
Every process's loop polls the same socket, so each new connection wakes all of them.

This script runs exactly those classes of the installed vLLM (no copy) around a trivial ASGI app: `--servers 1` is
`NoSignalServer(config)` serving `sockets=[sock]` in one process, `--servers 2` spawns two processes with vLLM's
shared load array and the one inherited socket, as `APIServerProcessManager` does. A client (aiohttp with
`vllm bench serve`'s connector: no connection limit, keep-alive) sends `--requests` requests at once on new
connections ("fresh"), then as many again on the now kept-alive connections ("warm"), `--rounds` times with a new
client session each round. Everything runs on `--cores` (the campaign's core 0). Per phase it records each server
process's CPU (schedstat ns), context switches (/proc/PID/status) and the client's CPU; with `--strace` the server
processes' syscalls per phase (`strace -c -f -p`; counts only: ptrace inflates the times).

    taskset -c 0 "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_serve_accept.py --servers 2 --out $OUT/a2.json

Results and their reading: docs/benchmark-history/2026-12-01b-serve21.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BODY = b'{"ok": true}'


def busy(seconds: float) -> None:
    """Spend `seconds` of this thread's CPU on the loop (a request's own work: rendering, tokenizing)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def make_app(work_s: float, chunks: int):
    """A bare ASGI app: reads the request, spends `work_s` of CPU, answers with `chunks` body writes (a stream of
    SSE-like chunks when > 1), so the server's per-request work is small and the same in both setups."""
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        busy(work_s)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        for i in range(chunks):
            await send({"type": "http.response.body", "body": BODY, "more_body": i + 1 < chunks})
            if i + 1 < chunks:
                await asyncio.sleep(0)
    return app


def serve(sock: socket.socket, peer_loads: Any, work_s: float, chunks: int) -> None:
    """One API-server process: vLLM's NoSignalServer on the given socket (with peer_loads: vLLM's least-loaded
    accept; without: uvicorn's own server), on uvloop as `vllm serve` runs it."""
    import uvicorn
    import uvloop
    from vllm.entrypoints.launchers.launcher import NoSignalServer

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    config = uvicorn.Config(make_app(work_s, chunks), log_level="warning", access_log=False, lifespan="on")
    config.load()
    server = NoSignalServer(config, peer_loads=peer_loads)
    uvloop.run(server.serve(sockets=[sock]))


def proc_counters(pid: int) -> dict[str, int]:
    """CPU ns on a core and ns runnable waiting (schedstat, summed over the process's threads), its threads' times
    scheduled in, and voluntary / involuntary context switches (/proc/PID/status, the whole process)."""
    out = {"cpu_ns": 0, "delay_ns": 0, "slices": 0}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            run, delay, slices = (int(x) for x in Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        out["cpu_ns"] += run
        out["delay_ns"] += delay
        out["slices"] += slices
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches"):
            out["voluntary"] = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches"):
            out["involuntary"] = int(line.split()[1])
    return out


def self_cpu_ns() -> int:
    return time.process_time_ns()


async def burst(session: Any, url: str, n: int) -> float:
    async def one() -> None:
        async with session.post(url, data=b'{"prompt": "x"}') as response:
            await response.read()
    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return time.perf_counter() - start


def strace_start(pids: list[int], path: Path, attach_s: float = 0.5) -> subprocess.Popen:
    """`strace -c -f` attached to `pids` (and their threads), given `attach_s` to attach before it returns."""
    command = ["strace", "-c", "-f", "-o", str(path)]
    for pid in pids:
        command += ["-p", str(pid)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(attach_s)
    return proc


def strace_stop(proc: subprocess.Popen, path: Path) -> dict[str, list[int]]:
    """{syscall: [calls, errors]} from `strace -c`'s table."""
    proc.send_signal(signal.SIGINT)
    proc.wait()
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            calls = int(parts[3])
            errors = int(parts[4]) if len(parts) == 6 else 0
            out[parts[-1]] = [calls, errors]
    return out


async def client(args: argparse.Namespace, pids: list[int], out: dict[str, Any]) -> None:
    import aiohttp

    url = f"http://127.0.0.1:{args.port}/v1/completions"
    for rnd in range(args.rounds):
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, use_dns_cache=True,
                                         keepalive_timeout=60, enable_cleanup_closed=True, force_close=False)
        async with aiohttp.ClientSession(connector=connector) as session:
            for phase in ("fresh", "warm"):
                tracer = None
                if args.strace and rnd == args.rounds - 1:
                    trace_path = args.work_dir / f"strace-a{args.servers}-{phase}.txt"
                    tracer = strace_start(pids, trace_path)
                before = {pid: proc_counters(pid) for pid in pids}
                client_before = self_cpu_ns()
                wall = await burst(session, url, args.requests)
                client_cpu = self_cpu_ns() - client_before
                after = {pid: proc_counters(pid) for pid in pids}
                row: dict[str, Any] = {"round": rnd, "phase": phase, "wall_s": wall, "client_cpu_s": client_cpu / 1e9,
                                       "servers": {}}
                for pid in pids:
                    row["servers"][str(pid)] = {k: after[pid][k] - before[pid][k] for k in after[pid]}
                row["servers_cpu_s"] = sum(v["cpu_ns"] for v in row["servers"].values()) / 1e9
                row["servers_cpu_per_request_ms"] = row["servers_cpu_s"] * 1e3 / args.requests
                if tracer is not None:
                    row["strace"] = strace_stop(tracer, trace_path)
                out["phases"].append(row)
                print(f"a{args.servers} round {rnd} {phase}: servers {row['servers_cpu_per_request_ms']:.3f} ms CPU a "
                      f"request, client {client_cpu / 1e6 / args.requests:.3f}, wall {wall * 1e3:.1f} ms, switches "
                      + ", ".join(f"{v['voluntary']}+{v['involuntary']}" for v in row["servers"].values()),
                      file=sys.stderr, flush=True)
                await asyncio.sleep(0.3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, choices=(1, 2), required=True)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work-ms", type=float, default=0.0, help="CPU a request spends on the server's loop")
    parser.add_argument("--chunks", type=int, default=1, help="body writes a response")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--strace", action="store_true", help="count the servers' syscalls in the last round")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)

    from vllm.entrypoints.launchers.launcher import create_server_socket

    sock = create_server_socket(("127.0.0.1", args.port), reuse_port=args.servers > 1)
    ctx = multiprocessing.get_context("spawn")
    loads = ctx.RawArray("i", [2**31 - 1] * args.servers) if args.servers > 1 else None
    procs = [ctx.Process(target=serve, name=f"ApiServer_{i}",
                         args=(sock, (loads, i) if loads is not None else None, args.work_ms / 1e3, args.chunks))
             for i in range(args.servers)]
    for proc in procs:
        proc.start()
    sock.close()
    deadline = time.time() + 60
    while time.time() < deadline:  # up: a connection answered
        try:
            socket.create_connection(("127.0.0.1", args.port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.2)
    time.sleep(2)
    import vllm

    out: dict[str, Any] = {"servers": args.servers, "requests": args.requests, "work_ms": args.work_ms,
                           "chunks": args.chunks, "vllm": vllm.__version__, "cpus": sorted(os.sched_getaffinity(0)),
                           "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                           "loadavg": Path("/proc/loadavg").read_text().split()[:3], "phases": []}
    try:
        asyncio.run(client(args, [p.pid for p in procs if p.pid is not None], out))
    finally:
        for proc in procs:
            proc.terminate()
            proc.join(10)
    out["loadavg_after"] = Path("/proc/loadavg").read_text().split()[:3]
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
