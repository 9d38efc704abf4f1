"""Entry point: builds the typer app from each area's commands and turns every error into one line.

Exit codes: 0 done; 1 done, but some turns failed or the checked file has
problems; 2 a user error (bad option, bad input, unwritable output: the line
names the file, line or turn and what was expected); 3 an internal error (the
line says where the traceback was written); 130 interrupted.
"""

from __future__ import annotations

import _thread
import importlib
import sys
import threading
import traceback
from typing import Any, NoReturn

import typer
from rich.markup import escape

from apcir._version import __version__
from apcir.cli.lazy import LazyGroup
from apcir.console import err as err_console
from apcir.errors import ApcirError, crash_log_path, set_crash_log_dir
from apcir.settings import check_environment

# Each area of the CLI is a module apcir/cli/<area>_commands.py with a register(app) function; the group imports
# a module when one of its commands runs, so `apcir --help` imports none (apcir/cli/lazy.py).
app = typer.Typer(
    name="apcir",
    help="Adaptive personalised conversational search on TREC iKAT (APCIR).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,
)

USER_ERROR, INTERNAL_ERROR, INTERRUPTED = 2, 3, 130


def _click_exceptions() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(usage errors, aborts) of the click that typer uses: its vendored copy, and click itself if installed."""
    usage: list[type[BaseException]] = []
    aborts: list[type[BaseException]] = []
    for module in ("typer._click.exceptions", "typer.exceptions", "click.exceptions"):
        try:
            found: Any = importlib.import_module(module)
        except ImportError:
            continue
        usage += [found.ClickException] if hasattr(found, "ClickException") else []
        aborts += [found.Abort] if hasattr(found, "Abort") else []
    return tuple(usage), tuple(aborts)


_USAGE, _ABORT = _click_exceptions()


def _version(value: bool) -> None:
    if value:
        print(f"apcir {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Adaptive personalised conversational search on TREC iKAT (APCIR)."""


def _say(message: str) -> None:
    err_console.print("[bold red]error:[/] " + escape(message), highlight=False, soft_wrap=True)


def _usage_line(exc: Any) -> str:
    """One line for a click usage error: what is wrong, and where to look."""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "apcir"
    return f"{message.strip()} (see: {command} --help)"


def _crash(exc: BaseException) -> int:
    """Write the traceback where :func:`crash_log_path` says, print one line saying so."""
    path = crash_log_path()
    set_crash_log_dir(None)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(f"apcir {__version__}: {' '.join(sys.argv)}\n{text}\n")
        where = f"the full traceback is in {path}"
    except OSError:
        where = "the traceback could not be written to a file:\n" + text
    _say(f"internal error ({type(exc).__name__}: {exc}); this is a bug in apcir, please report it; {where}")
    return INTERNAL_ERROR


def _redeliver_interrupts(unraisable: Any) -> None:
    """A Ctrl-C that lands in a finalizer (``__del__``) is discarded by Python, and the command would run on:
    deliver it again, to wherever the main thread is next, so that it stops the command."""
    if issubclass(unraisable.exc_type, KeyboardInterrupt):
        # Shortly, from another thread: raised now it would land in this hook's own (discarded) context again.
        timer = threading.Timer(0.05, _thread.interrupt_main)
        timer.daemon = True
        timer.start()
        return
    sys.__unraisablehook__(unraisable)


def _interrupted() -> NoReturn:
    err_console.print("interrupted; finished work is on disk and a re-run resumes from it")
    sys.exit(INTERRUPTED)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; see the module docstring for what each exit code means."""
    sys.unraisablehook = _redeliver_interrupts
    try:
        # before any command imports numpy or matplotlib, which read SOURCE_DATE_EPOCH and fail on a bad value
        # with a bare ValueError that names no variable
        check_environment()
        code = app(args=argv, standalone_mode=False)
        if code == INTERRUPTED:
            _interrupted()  # typer turns a KeyboardInterrupt into Exit(130), and returns its code
        if isinstance(code, int) and code:
            sys.exit(code)
    except ApcirError as exc:
        _say(str(exc))
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        if exc.exit_code == INTERRUPTED and isinstance(exc.__cause__, KeyboardInterrupt):
            _interrupted()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except _USAGE as exc:
        if type(exc).__name__ == "NoArgsIsHelpError" or not str(exc.format_message()).strip():  # type: ignore[attr-defined]
            sys.exit(0)  # the help was shown: nothing else to say
        _say(_usage_line(exc))
        sys.exit(getattr(exc, "exit_code", USER_ERROR) or USER_ERROR)
    except _ABORT as exc:
        if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
            _interrupted()
        sys.exit(1)
    except UnicodeDecodeError as exc:
        _say(f"not UTF-8 text ({exc.reason} at byte {exc.start})")
        sys.exit(USER_ERROR)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        _say(f"{where}{exc.strerror or type(exc).__name__}")
        sys.exit(USER_ERROR)
    except SystemExit:
        raise
    except Exception as exc:
        sys.exit(_crash(exc))
