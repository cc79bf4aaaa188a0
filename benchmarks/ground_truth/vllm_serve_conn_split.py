"""Real `vllm serve` with one and two API-server processes: the API servers' CPU per request on new connections
against the same requests on kept-alive ones, per process and thread, with their syscalls counted.

`vllm bench serve` opens one connection per request in flight (aiohttp, no connection limit, keep-alive): a burst of
N requests opens N connections, one request at a time reuses one. With `--api-server-count 2` every connection is
accepted through vLLM's least-loaded accept (`vllm/entrypoints/launchers/launcher.py` `NoSignalServer._accept`,
both processes polling the one inherited socket), with one process through uvicorn's server (uvloop's listening
handle). This separates the two: per round, a burst of `--requests` 1-token completions on new connections
("fresh"), then the same burst again on the now kept-alive connections ("warm"), then `--serial` requests one at a
time on one of them ("serial"); each phase's counters are every server process's and thread's CPU and run delay
(schedstat), times scheduled in, context switches and page faults, before and after. The last round (`--strace`)
repeats the phases under `strace -c -f` attached to the API-server processes: syscall counts and errors per phase
(counts only: ptrace slows every call).

Runs under vLLM's virtual environment, on the campaign's pinning (API servers and client on core 0, the engine core
and Worker on core 1) and flags, reusing `vllm_serve_bench.py`'s server start:

    echo -20 > /proc/self/autogroup
    PYTHONPATH=$PWD "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_serve_conn_split.py --work-dir $W \
        --sessions a1,a2,a1,a2 --out $OUT/conn-split.json --strace

Results and their reading: docs/benchmark-history/2026-12-01b-serve21.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import vllm_serve_bench as vsb
from vllm_serve_accept import strace_start, strace_stop

WORDS = ("the", "of", "and", "model", "serve", "request", "token", "engine", "batch", "core", "python", "loop",
         "socket", "accept", "process", "thread", "cache", "kernel", "queue", "stream", "prompt", "output", "value")


def prompts(n: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) + f" {i}" for i in range(n)]


def counters(pids: dict[int, str]) -> dict[str, list[int]]:
    """Per thread, "process-name/pid/thread-name/tid" -> [cpu ns, run delay ns, times scheduled in, voluntary
    switches, involuntary switches, minor faults, major faults] (schedstat, status, stat of the task)."""
    out: dict[str, list[int]] = {}
    for pid, pname in pids.items():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            base = f"/proc/{pid}/task/{tid}"
            try:
                sched = [int(x) for x in Path(f"{base}/schedstat").read_text().split()]
                status = Path(f"{base}/status").read_text()
                stat = Path(f"{base}/stat").read_text()
            except (OSError, ValueError):
                continue
            name, rest = stat.split("(", 1)[1].rsplit(")", 1)
            fields = rest.split()
            vol = invol = 0
            for line in status.splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    vol = int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    invol = int(line.split()[1])
            out[f"{pname}/{pid}/{name}/{tid}"] = [*sched[:3], vol, invol, int(fields[7]), int(fields[9])]
    return out


def diff(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, list[int]]:
    return {k: [a - b for a, b in zip(v, before.get(k, [0] * len(v)))] for k, v in after.items()
            if v[0] - before.get(k, [0])[0] > 0}


def switch_counts(path: Path, pids: dict[int, str]) -> dict[str, int]:
    """From `perf record -e sched:sched_switch` on the API servers' core: the switches from one thread to another,
    counted by the pair of roles ("api:<pid>", "client", "other", "idle"), how many of them change process (address
    space) between two busy tasks, and how often an API-server process was switched in (`api_resumed`) after another
    API-server process had run since it was last switched out (`api_resumed_after_other_api`)."""
    tgid = {}
    for pid, role in pids.items():
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                tgid[int(tid)] = f"{role}:{pid}"
        except OSError:
            pass
    tgid[os.getpid()] = "client"
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        tgid[int(tid)] = "client"
    text = subprocess.run(["perf", "script", "-i", str(path), "-F", "pid,tid,trace"], capture_output=True,
                          text=True).stdout
    for line in text.splitlines():  # each sample's (switched-out) task: its process, where /proc no longer has it
        head = re.match(r"\s*(\d+)/(\d+)\s", line)
        if head and int(head[2]) not in tgid and int(head[1]) in pids:
            tgid[int(head[2])] = f"{pids[int(head[1])]}:{head[1]}"
    out: dict[str, int] = {}
    cross = resumed = after_other = 0
    since: dict[str, set[str]] = {}  # API-server process -> the processes switched in since it was switched out
    for line in text.splitlines():
        prev = re.search(r"prev_pid=(\d+)", line)
        nxt = re.search(r"next_pid=(\d+)", line)
        if not prev or not nxt:
            continue
        p, n = int(prev[1]), int(nxt[1])
        a = "idle" if p == 0 else tgid.get(p, "other")
        b = "idle" if n == 0 else tgid.get(n, "other")
        out[f"{a}->{b}"] = out.get(f"{a}->{b}", 0) + 1
        if a != b and "idle" not in (a, b):
            cross += 1
        for key, ran in since.items():
            if key != b:
                ran.add(b)
        if b.startswith("api:"):
            if b in since:
                resumed += 1
                after_other += any(x.startswith("api:") and x != b for x in since[b])
            since[b] = set()
    out["cross_process_busy"] = cross
    out["api_resumed"] = resumed
    out["api_resumed_after_other_api"] = after_other
    return out


async def client(args: argparse.Namespace) -> dict[str, Any]:
    """The phases, from a client pinned to the API servers' core (this process)."""
    import aiohttp

    pids = {int(p): n for p, n in (x.split(":", 1) for x in args.pids.split(","))}
    api_pids = [int(p) for p in args.api_pids.split(",")]
    url = f"http://127.0.0.1:{args.port}/v1/completions"
    texts = prompts(args.requests, args.words, args.seed)

    async def one(session: Any, text: str) -> None:
        body = {"model": "tiny", "prompt": text, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        async with session.post(url, json=body) as response:
            assert response.status == 200, response.status
            async for _ in response.content:
                pass

    rows = []
    extra = ((["strace"] if args.strace else []) + (["perf"] if args.perf_switches else [])
             + (["profile"] if args.profile else []))
    for rnd in range(args.rounds + len(extra)):
        traced = rnd >= args.rounds and extra[rnd - args.rounds] == "strace"
        switches = rnd >= args.rounds and extra[rnd - args.rounds] == "perf"
        profiled = rnd >= args.rounds and extra[rnd - args.rounds] == "profile"
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, use_dns_cache=True,
                                         keepalive_timeout=60, enable_cleanup_closed=True, force_close=False)
        serial_connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=60, force_close=False)
        async with aiohttp.ClientSession(connector=connector, trust_env=True) as burst_session, \
                aiohttp.ClientSession(connector=serial_connector, trust_env=True) as serial_session:
            # (one at a time on a session of its own: one connection, not the burst's, which the server closes
            # after 5 s idle, uvicorn's keep-alive as vLLM sets it)
            for phase in args.phases.split(","):
                session = burst_session if phase in ("fresh", "warm") else serial_session
                tracer = perf = None
                if traced:
                    trace_path = Path(args.trace_dir) / f"strace-{args.session}-{phase}.txt"
                    tracer = strace_start(api_pids, trace_path, attach_s=1.0)  # every thread
                if switches:
                    perf_path = Path(args.trace_dir) / f"switches-{args.session}-{phase}.data"
                    perf = subprocess.Popen(["perf", "record", "-q", "-e", "sched:sched_switch", "-C", args.core,
                                             "-o", str(perf_path)], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                if profiled:  # timeline_site/sitecustomize.py: cProfile on from this signal to the next
                    for pid in api_pids:
                        os.kill(pid, signal.SIGUSR2)
                    await asyncio.sleep(0.2)
                before = counters(pids)
                cpu0, t0 = time.process_time_ns(), time.perf_counter()
                if phase == "serial":
                    for text in texts[:args.serial]:
                        await one(session, text)
                elif phase == "paced":  # one request every 1 / rate s, each on an idle connection or a new one
                    tasks = []
                    for k in range(args.paced):
                        await asyncio.sleep(max(0.0, t0 + k / args.paced_rate - time.perf_counter()))
                        tasks.append(asyncio.ensure_future(one(session, texts[k % len(texts)])))
                    await asyncio.gather(*tasks)
                elif phase == "idle":
                    await asyncio.sleep(args.idle_s)
                else:
                    await asyncio.gather(*(one(session, t) for t in texts))
                wall, cpu = time.perf_counter() - t0, time.process_time_ns() - cpu0
                if perf is not None:
                    perf.send_signal(signal.SIGINT)
                    perf.wait()
                if profiled:
                    for pid in api_pids:
                        os.kill(pid, signal.SIGUSR2)
                row: dict[str, Any] = {"round": rnd, "phase": phase, "traced": traced or switches or profiled,
                                       "wall_s": wall,
                                       "client_cpu_s": cpu / 1e9,
                                       "requests": {"serial": args.serial, "paced": args.paced, "idle": 0}.get(
                                           phase, args.requests),
                                       "threads": diff(before, counters(pids))}
                if tracer is not None:
                    row["strace"] = strace_stop(tracer, trace_path)
                if perf is not None:
                    row["switches"] = switch_counts(perf_path, pids)
                if profiled:
                    row["profiled"] = True
                rows.append(row)
                await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)  # the connections closed
    return {"rows": rows}


def api_processes(leader: int, count: int) -> dict[int, str]:
    """The session's processes by role: "api" (the one API server, the leader, with one; the `ApiServer_<i>`
    processes with more), "launcher" (the leader with more), "engine" (EngineCore), "worker"."""
    out = {}
    for pid, name in vsb.server_pids(leader).items():
        if pid == leader:
            out[pid] = "api" if count == 1 else "launcher"
        elif name.startswith("VLLM::APIServer") or name.startswith("ApiServer"):
            out[pid] = "api"
        elif name.startswith("VLLM::EngineCor"):
            out[pid] = "engine"
        elif name.startswith("VLLM::Worker"):
            out[pid] = "worker"
        else:
            out[pid] = name
    return out


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase row, the API-server processes' totals per request (CPU ms, run delay ms, scheduled in, voluntary
    and involuntary switches, minor faults) and per API process, and the syscalls per request where traced."""
    out = []
    for row in rows:
        n = row["requests"] or row["wall_s"]  # idle: per second
        api = [v for k, v in row["threads"].items() if k.startswith("api/")]
        tot = [sum(v[i] for v in api) for i in range(7)]
        per_proc: dict[str, float] = {}
        for k, v in row["threads"].items():
            if k.startswith("api/"):
                pid = k.split("/")[1]
                per_proc[pid] = per_proc.get(pid, 0.0) + v[0] / 1e6 / n
        s = {"round": row["round"], "phase": row["phase"], "traced": row["traced"], "requests": n,
             "wall_s": round(row["wall_s"], 4), "api_cpu_ms_per_request": round(tot[0] / 1e6 / n, 4),
             "api_delay_ms_per_request": round(tot[1] / 1e6 / n, 4),
             "api_scheduled_per_request": round(tot[2] / n, 3), "api_voluntary_per_request": round(tot[3] / n, 3),
             "api_involuntary_per_request": round(tot[4] / n, 3), "api_minor_faults_per_request": round(tot[5] / n, 3),
             "api_cpu_ms_per_request_by_process": {p: round(v, 4) for p, v in per_proc.items()},
             "client_cpu_ms_per_request": round(row["client_cpu_s"] * 1e3 / n, 4)}
        for role in ("engine", "worker", "launcher"):
            cpu = sum(v[0] for k, v in row["threads"].items() if k.startswith(role + "/"))
            s[f"{role}_cpu_ms_per_request"] = round(cpu / 1e6 / n, 4)
        if "switches" in row:
            s["switches_per_request"] = {k: round(v / n, 3) for k, v in sorted(row["switches"].items())}
        if "strace" in row:
            s["syscalls_per_request"] = {k: [round(c / n, 3), round(e / n, 3)] for k, (c, e) in
                                         sorted(row["strace"].items(), key=lambda kv: -kv[1][0])}
        out.append(s)
    return out


def report(index: dict[str, Any]) -> list[dict[str, Any]]:
    """Per session and phase, the medians over its untraced rounds (API CPU, run delay, scheduled-in, switches,
    faults, client CPU, per request), and from its traced rounds the syscalls and the core's switches per request."""
    import statistics

    out = []
    for session in index["sessions"]:
        for phase in ("fresh", "warm", "paced", "idle", "serial"):
            if not any(s["phase"] == phase for s in session["summary"]):
                continue
            clean = [s for s in session["summary"] if s["phase"] == phase and not s["traced"]]
            row: dict[str, Any] = {"session": session["name"], "api_server_count": session["api_server_count"],
                                   "phase": phase, "rounds": len(clean)}
            for key in ("api_cpu_ms_per_request", "api_delay_ms_per_request", "api_scheduled_per_request",
                        "api_voluntary_per_request", "api_involuntary_per_request", "api_minor_faults_per_request",
                        "client_cpu_ms_per_request", "engine_cpu_ms_per_request", "wall_s"):
                row[key] = round(statistics.median(s[key] for s in clean), 4) if clean else None
            for s in session["summary"]:
                if s["phase"] == phase and "syscalls_per_request" in s:
                    row["syscalls_per_request"] = s["syscalls_per_request"]
                if s["phase"] == phase and "switches_per_request" in s:
                    row["switches_per_request"] = s["switches_per_request"]
            out.append(row)
    return out


def profile_diff(index: dict[str, Any], work_dir: Path, number: int, top: int = 25) -> dict[str, Any]:
    """The profiled round's phase `number` (1: the first phase, ...): per API-server count, the cProfile stats of its
    sessions' API-server loops added up (`timeline_site/sitecustomize.py`'s prof-<pid>-<n>.out), per request; then
    the functions whose own time (tottime) and calls a request differ most, two processes less one."""
    import pstats

    per_count: dict[int, dict[str, list[float]]] = {}
    requests: dict[int, int] = {}
    for session in index["sessions"]:
        rows = [r for r in session["rows"] if r.get("profiled")]
        if len(rows) < number:
            continue
        row = rows[number - 1]
        pids = sorted({k.split("/")[1] for k in row["threads"] if k.startswith("api/")})
        count = session["api_server_count"]
        requests[count] = requests.get(count, 0) + row["requests"]
        table = per_count.setdefault(count, {})
        for pid in pids:
            path = work_dir / f"prof-{pid}-{number}.out"
            if not path.exists():
                continue
            for (file, line, func), (_cc, ncalls, tottime, _ct, _callers) in pstats.Stats(str(path)).stats.items():
                # (the installed packages' paths cut to the package: no machine's paths in the results)
                key = f"{file.rsplit('site-packages/', 1)[-1].rsplit('/lib/python3', 1)[-1]}:{line}({func})"
                entry = table.setdefault(key, [0.0, 0.0])
                entry[0] += ncalls
                entry[1] += tottime
    if set(per_count) != {1, 2}:
        return {}
    norm = {c: {k: [v[0] / requests[c], v[1] * 1e3 / requests[c]] for k, v in t.items()} for c, t in per_count.items()}
    keys = set(norm[1]) | set(norm[2])
    rows_out = [{"function": k, "calls_a1": round(norm[1].get(k, [0, 0])[0], 3),
                 "calls_a2": round(norm[2].get(k, [0, 0])[0], 3),
                 "tottime_ms_a1": round(norm[1].get(k, [0, 0])[1], 4),
                 "tottime_ms_a2": round(norm[2].get(k, [0, 0])[1], 4)} for k in keys]
    by_time = sorted(rows_out, key=lambda r: -(r["tottime_ms_a2"] - r["tottime_ms_a1"]))[:top]
    by_calls = sorted(rows_out, key=lambda r: -abs(r["calls_a2"] - r["calls_a1"]))[:top]
    total = {c: round(sum(v[1] for v in norm[c].values()), 3) for c in norm}
    return {"requests": requests, "tottime_ms_per_request": total, "by_time": by_time, "by_calls": by_calls}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, help="the model (vllm_serve_bench.py's) and server logs")
    parser.add_argument("--out", type=Path, help="the sessions' results (JSON); appended to when it exists")
    parser.add_argument("--sessions", default="a1,a2", help="server sessions in order: a1 / a2 (API servers)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--serial", type=int, default=40)
    parser.add_argument("--words", type=int, default=100, help="words a prompt (~128 tokens)")
    parser.add_argument("--max-tokens", type=int, default=1, help="output tokens a request (streamed)")
    parser.add_argument("--phases", default="fresh,warm,serial",
                        help="of fresh, warm (bursts on new / kept-alive connections), paced (--paced requests at "
                             "--paced-rate a second), idle (--idle-s with no request: per second), serial")
    parser.add_argument("--paced", type=int, default=200)
    parser.add_argument("--paced-rate", type=float, default=20.0)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--strace", action="store_true", help="one more round under strace -c")
    parser.add_argument("--perf-switches", action="store_true",
                        help="one more round with the API core's context switches recorded (perf sched_switch)")
    parser.add_argument("--profile", action="store_true",
                        help="one more round with the API servers' loops under cProfile (per phase: "
                             "<work-dir>/prof-<pid>-<n>.out; timeline_site/sitecustomize.py)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--api-cores", default="0")
    parser.add_argument("--engine-cores", default="1")
    # client mode (internal): run the phases against a running server
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pids", help=argparse.SUPPRESS)
    parser.add_argument("--api-pids", help=argparse.SUPPRESS)
    parser.add_argument("--session", help=argparse.SUPPRESS)
    parser.add_argument("--trace-dir", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--core", default="0", help=argparse.SUPPRESS)
    parser.add_argument("--client-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help="print the medians of a results file (--out) as JSON lines")
    parser.add_argument("--profile-diff", type=int, default=0, metavar="N",
                        help="with --report and --work-dir: the profiled round's N-th phase, two processes less one")
    args = parser.parse_args()
    if args.report is not None:
        if args.profile_diff:
            print(json.dumps(profile_diff(json.loads(args.report.read_text()), args.work_dir, args.profile_diff),
                             indent=1))
            return 0
        for row in report(json.loads(args.report.read_text())):
            print(json.dumps(row))
        return 0
    if args.client:
        args.client_out.write_text(json.dumps(asyncio.run(client(args))) + "\n")
        return 0
    if args.work_dir is None or args.out is None:
        parser.exit(2, "--work-dir and --out are required\n")
    sessions = args.sessions.split(",")
    if not all(s in ("a1", "a2") for s in sessions):
        parser.exit(2, f"--sessions: {args.sessions}: each must be a1 or a2\n")
    args.model_dir = args.work_dir / "llama-tiny-bpe"
    if not (args.model_dir / "tokenizer.json").exists():
        parser.exit(2, f"--work-dir: no model in {args.model_dir} (run vllm_serve_bench.py once to build it)\n")
    args.kv_gib, args.dtype, args.timeline, args.engine_steps_file = 2, "float32", False, None
    if args.profile:  # the server's processes load timeline_site/sitecustomize.py (start_server's env is this one's)
        site = str(Path(__file__).resolve().parent / "timeline_site")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))
        os.environ["VLLM_SERVE_PROFILE_DIR"] = str(args.work_dir)
    args.switch_interval_s = None
    args.server_flags = vsb.server_flags(sys.executable)
    args.vllm_server = vsb.vllm_version(sys.executable)
    args.platform_fallback = vsb.has_platform_fallback(sys.executable)
    index: dict[str, Any] = (json.loads(args.out.read_text()) if args.out.exists() else
                             {"vllm_server": args.vllm_server, "server_flags": args.server_flags,
                              "max_tokens": args.max_tokens,
                              "requests": args.requests, "serial": args.serial, "words": args.words, "sessions": []})
    for i, session in enumerate(sessions):
        count = int(session[1])
        name = f"{session}-s{len(index['sessions'])}"
        log_path = args.work_dir / f"server-{name}.log"
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        proc = vsb.start_server(args, count, log_path)
        try:
            time.sleep(3)
            procs = api_processes(proc.pid, count)
            api = [p for p, r in procs.items() if r == "api"]
            vsb.log(f"session {name}: processes {procs}, load average {vsb.loadavg()}")
            client_out = args.work_dir / f"conn-{name}.json"
            load0 = vsb.loadavg()
            ticks0 = vsb.cpu_ticks()
            subprocess.run(["taskset", "-c", args.api_cores, sys.executable, __file__, "--client",
                            "--port", str(args.port), "--pids", ",".join(f"{p}:{r}" for p, r in procs.items()),
                            "--api-pids", ",".join(map(str, api)), "--session", name,
                            "--trace-dir", str(args.work_dir), "--rounds", str(args.rounds),
                            "--requests", str(args.requests), "--serial", str(args.serial), "--words",
                            str(args.words), "--max-tokens", str(args.max_tokens), "--seed", str(i),
                            "--phases", args.phases, "--paced", str(args.paced), "--paced-rate", str(args.paced_rate),
                            "--idle-s", str(args.idle_s),
                            *(["--strace"] if args.strace else []),
                            *(["--perf-switches"] if args.perf_switches else []), "--core", args.api_cores,
                            *(["--profile"] if args.profile else []),
                            "--client-out", str(client_out)], check=True)
            rows = json.loads(client_out.read_text())["rows"]
            index["sessions"].append({"name": name, "api_server_count": count, "started_utc": started,
                                      "ended_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                                      "loadavg_before": load0, "loadavg_after": vsb.loadavg(),
                                      "cpus": vsb.cpu_use_s(ticks0, vsb.cpu_ticks()),
                                      "server_autogroup_nice": args.server_autogroup_nice,
                                      "summary": summarize(rows), "rows": rows})
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(index, indent=1) + "\n")
            for s in index["sessions"][-1]["summary"]:
                vsb.log(f"{name} r{s['round']} {s['phase']}{' (strace)' if 'syscalls_per_request' in s else ''}"
                        f"{' (switches)' if 'switches_per_request' in s else ''}: API CPU "
                        f"{s['api_cpu_ms_per_request']} ms a request {s['api_cpu_ms_per_request_by_process']}, "
                        f"switches {s['api_voluntary_per_request']}+{s['api_involuntary_per_request']}, "
                        f"client {s['client_cpu_ms_per_request']}")
        finally:
            vsb.stop_server(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
