"""Entry point: builds the typer app from each area's commands and turns user errors into messages."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

import apcir.cli
from apcir import __version__
from apcir.cli.common import err_console
from apcir.errors import ApcirError

app = typer.Typer(
    name="apcir",
    help="Adaptive personalised conversational search on TREC iKAT (APCIR).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Each area of the CLI is a module apcir/cli/<area>_commands.py with a register(app) function;
# --help lists them in pipeline order, then any other area.
_ORDER = ("run", "data", "reformulate", "retrieval", "fusion", "export", "eval", "report")
_areas = [m.name for m in pkgutil.iter_modules(apcir.cli.__path__) if m.name.endswith("_commands")]
for name in sorted(_areas, key=lambda n: (_ORDER.index(n[: -len("_commands")]) if n[: -len("_commands")] in _ORDER
                                          else len(_ORDER), n)):
    importlib.import_module(f"apcir.cli.{name}").register(app)


def _version(value: bool) -> None:
    if value:
        print(f"apcir {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Adaptive personalised conversational search on TREC iKAT (APCIR)."""


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; an :class:`ApcirError` becomes one line on stderr and exit code 2."""
    try:
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except ApcirError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted; finished work is on disk and a re-run resumes from it")
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(1)
        raise
