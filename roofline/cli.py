"""The `roofline` command line: one module per subcommand under `roofline.commands`.

Each command module defines `add_parser(subparsers) -> argparse.ArgumentParser` and sets `run=` on it;
`run(args) -> int` does the work. A `UserError`/`ValueError` (bad input) is printed as one line and exits 2, and
so is a flag argparse refuses (`_Parser`: the error without the usage block); torch is imported only inside the
commands that need it.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from typing import NoReturn

from roofline import __version__

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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="roofline",
        description="Capacity planning for LLM serving: a roofline cost model, a serving simulator and a "
        "real paged-KV engine that checks them.",
    )
    parser.add_argument("--version", action="version", version=f"roofline {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"roofline.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"roofline.commands.{name}":
                raise
            continue
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    command = "roofline"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
        command = f"roofline {args.command}"
        return int(args.run(args) or 0)
    except (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError,
            PermissionError) as exc:
        print(f"{command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # A second Ctrl-C while this one unwinds ends the process at once (the default action, exit 130 in a
        # shell), never with a traceback; worker pools and Ray were already ended where the interrupt passed
        # through them (`roofline.planning.executor`).
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        print(f"\n{command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _one_line(exc: BaseException) -> str:
    """A user error's message; an OS error (a path that is a file, not writable, ...) as its path and reason."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return str(exc)


if __name__ == "__main__":
    sys.exit(main())
