"""The `roofline` command line: one module per subcommand under `roofline.commands`.

Each command module defines `add_parser(subparsers) -> argparse.ArgumentParser` and sets `run=` on it;
`run(args) -> int` does the work. A `UserError`/`ValueError` (bad input) is printed as one line and exits 2, and
so is a flag argparse refuses (`_Parser`: the error without the usage block); torch is imported only inside the
commands that need it.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import NoReturn

from roofline import __version__
from roofline.commands import HELP

COMMANDS = [
    "simulate",
    "measure",
    "calibrate",
    "compare",
    "predict_ops",
    "profile_device",
    "plan",
    "profiles",
    "models",
]


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose refusals (unknown flag, invalid choice, missing or malformed value) are one line, exit
    2, as every other bad input: argparse's own error prints the whole usage block first. The subcommands' parsers
    are of this class too (`add_subparsers` makes them of the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with `command` (a subcommand's name as typed: `simulate`, `predict-ops`) only that
    subcommand's parser, so that a run imports its own command's modules and not every other's (calibrate's and
    plan's import matplotlib, pandas and scipy: most of `roofline simulate`'s start)."""
    parser, subparsers = _top_level()
    names = COMMANDS if command is None else [command.replace("-", "_")]
    for name in names:
        try:
            module = importlib.import_module(f"roofline.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"roofline.commands.{name}":
                raise
            continue
        module.add_parser(subparsers)
    return parser


def outline_parser() -> argparse.ArgumentParser:
    """The top level with every subcommand by its name and help line only (`roofline.commands.HELP`), no command's
    module imported: its help, version and refusals are `build_parser()`'s, and `main` takes it only for a command
    line that names no subcommand, whose arguments argparse then never parses."""
    parser, subparsers = _top_level()
    for name in COMMANDS:
        subparsers.add_parser(name.replace("_", "-"), help=HELP[name])
    return parser


def _top_level() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = _Parser(
        prog="roofline",
        description="Capacity planning for LLM serving: a roofline cost model, a serving simulator and a "
        "real paged-KV engine that checks them.",
    )
    parser.add_argument("--version", action="version", version=f"roofline {__version__}")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def _named_command(argv: list[str]) -> str | None:
    """The subcommand `argv` names first, if it is one of `COMMANDS` (argparse takes the first argument that is not
    an option as the subcommand: the top level has no option with a value); None otherwise (no subcommand, a
    misspelt one, or `--help` / `--version` before it), where the whole parser is built."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    if first is None or any(arg.startswith("-") for arg in argv[:argv.index(first)]):
        return None
    return first if first.replace("-", "_") in COMMANDS and "_" not in first else None


def _parser(argv: list[str], freeze_imports: bool) -> argparse.ArgumentParser:
    """The parser for `argv`, its command's modules imported with the cyclic garbage collector off: the imports'
    objects (numpy's and the project's modules: ~48,000 tracked by the collector for `simulate`, ~123,000 when it
    imported pandas and pyarrow) are long-lived and their garbage is little, but the collections their allocations
    trigger walk them again and again; frozen afterwards (`gc.freeze`, where `freeze_imports`), no later collection
    walks them, nor the one at the interpreter's exit. Only the collector's work changes, never a result
    (BENCHMARKS.md "Simulator speed")."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return build_parser(_named_command(argv)) if _names_a_command(argv) else outline_parser()
    finally:
        if freeze_imports:
            gc.freeze()
        if enabled:
            gc.enable()


def _names_a_command(argv: list[str]) -> bool:
    """Whether some argument could be taken for a subcommand (one of `COMMANDS`, with - or _): where none is,
    argparse never parses a subcommand's arguments and `outline_parser` answers as the whole parser would
    (`roofline --help`: ~0.05 s of CPU instead of ~0.6 s importing every command's modules)."""
    return any(arg.replace("-", "_") in COMMANDS for arg in argv if not arg.startswith("-"))


def main(argv: list[str] | None = None, freeze_imports: bool = False) -> int:
    """The command line `argv` run; its exit status. `freeze_imports` (the process's own run, `entry`): what the
    parser's imports made is moved out of the cyclic garbage collector's sight (`_parser`)."""
    command = "roofline"
    args = None
    _raised.clear()
    try:
        argv = sys.argv[1:] if argv is None else argv
        parser = _parser(argv, freeze_imports)
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
        command = f"roofline {args.command}"
        return int(args.run(args) or 0)
    except (Terminated, KeyboardInterrupt) as exc:
        return _interrupted(command, exc)
    except BrokenPipeError:
        return 0
    except Exception as exc:
        # An interrupt raised inside a C extension can come out as another error: as that module's ImportError
        # ("initialization failed", seen with matplotlib's ft2font when Ctrl-C lands while `plan` imports it), the
        # interrupt as its cause; or with no trace of it at all, where the extension turns any Python error into its
        # own (matplotlib's pybind11 bounding-box converter: "Invalid bounding box", seen with Ctrl-C while `plan`
        # draws its report). Either is still the interrupt, exit 130 and never a traceback or an "error" line.
        interrupt = _interrupt_in_chain(exc) or (_raised[-1] if _raised else None)
        if interrupt is not None:
            return _interrupted(command, interrupt)
        if isinstance(exc, (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError,
                            PermissionError)):
            print(f"{command}: error: {_one_line(exc)}", file=sys.stderr)
            return 2
        if isinstance(exc, OSError) and exc.errno is not None:
            # The machine's refusal, not the user's input (a full disk, a read-only or failing filesystem while
            # `--out` writes): its one line, exit 1; a write to an open file names no path: the output folder then.
            out = getattr(args, "out", None) if exc.filename is None else None
            message = f"--out {out}: {exc.strerror}" if out is not None else _one_line(exc)
            print(f"{command}: error: {message}", file=sys.stderr)
            return 1
        raise


def _interrupt_in_chain(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or `Terminated` among `exc`'s causes and contexts, if any."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, (KeyboardInterrupt, Terminated)):
            return link
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return None


def _interrupted(command: str, interrupt: BaseException) -> int:
    """The exit status after Ctrl-C (130) or SIGTERM (`TERMINATED_STATUS`), with its one line on stderr. A second one
    while this one unwinds (or one `_interrupt` re-sends late) ends the process at once with that status, never with
    a traceback; worker pools and Ray were already ended where the interrupt passed through them
    (`roofline.planning.executor`)."""
    if isinstance(interrupt, Terminated):
        signal.signal(signal.SIGTERM, lambda signum, frame: _exit_now(TERMINATED_STATUS))
        print(f"\n{command}: terminated", file=sys.stderr)
        return TERMINATED_STATUS
    signal.signal(signal.SIGINT, lambda signum, frame: _exit_now(130))
    print(f"\n{command}: interrupted", file=sys.stderr)
    return 130


# Functions an interrupt must not be raised in (`_interrupt`): callbacks whose exceptions Python prints and drops
# (importlib's module-lock weakref callback `cb`, weak sets' `_remove`, WeakKeyDictionary's and WeakValueDictionary's
# `remove` (Lib/weakref.py), finalizers) and `__set_name__`, whose exception class creation wraps in a RuntimeError.
_NOT_INTERRUPTIBLE = frozenset({"cb", "_remove", "remove", "__del__", "__set_name__"})


class Terminated(BaseException):
    """SIGTERM (`kill PID`, a job scheduler's stop), raised in the main thread as Ctrl-C raises KeyboardInterrupt. It
    unwinds through the executors, which end their worker processes and Ray tasks on any exception
    (`roofline.planning.executor.LocalExecutor.map`), so `roofline plan` leaves no orphaned workers: Python's default
    for SIGTERM ends the main process at once, and the spawned pool workers, blocked on their task queue, never learn
    of it. A BaseException, as KeyboardInterrupt, so that no `except Exception` swallows it."""


# The exit status after a SIGTERM: 128 + the signal's number, as a shell reports a process ended by it.
TERMINATED_STATUS = 128 + signal.SIGTERM


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT as Python's default handler, KeyboardInterrupt (SIGTERM: `Terminated`), unless it comes while one of
    `_NOT_INTERRUPTIBLE` runs: there it would be lost (printed as "Exception ignored", the program running on) or
    turned into another error, so it is sent again 10 ms later. Seen with Ctrl-C in a plan's first seconds, while it
    imports numpy, pandas and scipy."""
    if frame is not None and frame.f_code.co_name in _NOT_INTERRUPTIBLE:
        timer = threading.Timer(0.01, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    interrupt = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    _raised.append(interrupt)
    raise interrupt


# The interrupts `_interrupt` raised during this `main`: an error that follows one is that interrupt, whatever a C
# extension turned it into (`main`).
_raised: list[BaseException] = []


# After a Ctrl-C the exit handlers (multiprocessing's: a pool's queues and semaphores released, its processes joined)
# get this long before the process ends anyway.
_SHUTDOWN_AFTER_INTERRUPT_S = 3.0


# The commands that run torch in this process or a child (the engine's: `measure`, `profile-device`): their BLAS
# threads are torch's to set, never limited here (`_one_blas_thread`).
_TORCH_COMMANDS = frozenset({"measure", "profile_device"})


def _one_blas_thread(argv: list[str], environ: dict[str, str] | os._Environ[str]) -> bool:
    """Limit numpy's OpenBLAS to one thread for a torch-free command, unless the user chose a thread count
    (`OPENBLAS_NUM_THREADS`, or `OMP_NUM_THREADS`, which OpenBLAS reads next); whether it did. At `import numpy`
    OpenBLAS starts a thread per core, and each spins for its `THREAD_TIMEOUT` (2^28 cycles by default) before it
    sleeps (OpenBLAS `driver/others/blas_server.c`; numpy issue #29193: `import numpy` took 1.28 s of CPU on a
    17-thread host, 0.05 s with one thread), and wakes to spin again after any BLAS call (OpenBLAS issue #5171);
    the simulator's arrays are small and its fits' normal equations a few columns wide, so those threads only take
    CPU from the simulation and from a plan's worker processes, which inherit the setting. Set before numpy is
    imported: the thread count is read once, when OpenBLAS loads."""
    command = _named_command(argv)
    if command is None or command.replace("-", "_") in _TORCH_COMMANDS:
        return False
    if "OPENBLAS_NUM_THREADS" in environ or "OMP_NUM_THREADS" in environ:
        return False
    environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


def entry() -> NoReturn:
    """The `roofline` console script and `python -m roofline`: `main`'s exit status. Ctrl-C goes through `_interrupt`
    (where it is not ignored: a process started with SIGINT ignored keeps it so). After a Ctrl-C the exit handlers run
    (nothing left to warn of leaked semaphores), under a watchdog of `_SHUTDOWN_AFTER_INTERRUPT_S`, and the process
    ends with 130 by `os._exit`: the interpreter's own exit would end it by SIGINT instead when a KeyboardInterrupt
    once passed through a C extension's `PyRun_String` (CPython's unhandled-KeyboardInterrupt flag, seen in 3 of 30
    Ctrl-Cs in a plan's first second), whatever was caught since. SIGTERM likewise (`Terminated`, exit 143), where it
    is at its default. numpy's BLAS runs one thread for a torch-free command (`_one_blas_thread`)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    _one_blas_thread(sys.argv[1:], os.environ)
    status = main(freeze_imports=True)
    if status in (130, TERMINATED_STATUS):
        watchdog = threading.Timer(_SHUTDOWN_AFTER_INTERRUPT_S, _exit_now, (status,))
        watchdog.daemon = True
        watchdog.start()
        atexit._run_exitfuncs()
        _exit_now(status)
    sys.exit(status)


def _exit_now(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _one_line(exc: BaseException) -> str:
    """A user error's message; an OS error (a path that is a file, not writable, ...) as its path and reason."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)


if __name__ == "__main__":
    entry()
