"""Generate the reference pages from the code, so they cannot drift.

* ``docs/reference/cli.md``: every command and option of ``apcir``, from the CLI itself (typer/click);
* ``docs/reference/config.md``: every key of a run config, from the settings records (pydantic).

``python docs/gen_reference.py`` writes them; ``--check`` exits 1 when a committed page differs from what the
code says (``make docs`` and the tests run it).
"""

from __future__ import annotations

import functools
import operator
import sys
import typing
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PAGES = {"cli": HERE / "reference" / "cli.md", "config": HERE / "reference" / "config.md"}


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# ---- the command line ---------------------------------------------------------------------------
def commands() -> list[tuple[str, Any]]:
    """Every leaf command as (``apcir index build``, click command), in ``apcir --help`` order."""
    import typer

    from apcir.cli.main import app

    found: list[tuple[str, Any]] = []

    def walk(prefix: str, command: Any) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                walk(f"{prefix} {name}", sub)
        else:
            found.append((prefix, command))

    walk("apcir", typer.main.get_command(app))
    return found


def cli_reference() -> str:
    lines = ["# Command-line reference", "",
             "Generated from the CLI itself by `docs/gen_reference.py` (a test fails when this page and "
             "`apcir --help` differ). Every command prints the same with `--help`.", ""]
    for name, command in commands():
        lines += [f"## `{name}`", "", (command.help or "").strip().split("\n\n")[0].strip(), ""]
        arguments = [p for p in command.params if p.param_type_name == "argument"]
        options = [p for p in command.params if p.param_type_name == "option" and p.name != "help"]
        usage = " ".join([name, *(f"{a.name.upper()}{'...' if a.nargs == -1 else ''}" if a.required
                                  else f"[{a.name.upper()}{'...' if a.nargs == -1 else ''}]" for a in arguments),
                          "[OPTIONS]" if options else ""]).strip()
        lines += ["```text", usage, "```", ""]
        if arguments or options:
            lines += ["| argument / option | default | description |", "|---|---|---|"]
            for param in [*arguments, *options]:
                flags = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts]) if param.opts and \
                    param.param_type_name == "option" else f"`{param.name.upper()}`"
                default = "" if param.required or param.default in (None, False, (), []) else f"`{param.default}`"
                if param.required:
                    default = "required"
                lines.append(f"| {flags} | {default} | {_cell(getattr(param, 'help', '') or '')} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---- the run config -----------------------------------------------------------------------------
def _without_validators(annotation: Any) -> Any:
    """A union's members without their ``Annotated`` validators: ``Annotated[str, InRegistry(...)] | None`` is shown
    as ``str | None`` (pydantic strips them from a field's own annotation, not from a union's members)."""
    args = typing.get_args(annotation)
    if not any(typing.get_origin(a) is typing.Annotated for a in args):
        return annotation
    return functools.reduce(operator.or_, [typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a
                                           for a in args])


def _type_name(annotation: Any) -> str:
    annotation = _without_validators(annotation)
    text = repr(annotation) if not isinstance(annotation, type) else annotation.__name__
    return text.replace("typing.", "").replace("NoneType", "None").replace("apcir.", "")


def _model_of(annotation: Any) -> Any:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        model = _model_of(arg)
        if model is not None:
            return model
    return None


def config_keys() -> list[tuple[str, str, str, str]]:
    """Every config key as (dotted key, type, default, description), sections included."""
    from pydantic_core import PydanticUndefined

    from apcir.experiment.config import ExperimentConfig

    rows: list[tuple[str, str, str, str]] = []

    from apcir.options import EntrySettings

    def fields(model: Any) -> list[tuple[str, Any, str]]:
        """(key, field, description): a section whose entries have options of their own lists those of every entry
        it may choose, as it spells them (``nugget_tau``), each described with the entries that read it (the shared
        ``options`` holder is no key)."""
        if isinstance(model, type) and issubclass(model, EntrySettings):
            shared = [(n, f, f.description or "") for n, f in model.model_fields.items() if n != "options"]
            return shared + [(model.ENTRY_PREFIX + n, o.field, o.help) for n, o in model.entry_fields().items()]
        return [(n, f, f.description or "") for n, f in model.model_fields.items()]

    def walk(prefix: str, model: Any) -> None:
        for name, field, description in fields(model):
            key = f"{prefix}{name}"
            nested = _model_of(field.annotation)
            if field.default is PydanticUndefined and field.default_factory is None:
                default = "required"
            elif field.default_factory is not None:
                default = "" if nested is not None else f"`{field.default_factory()!r}`"
            else:
                default = f"`{field.default!r}`"
            if nested is not None:
                rows.append((key, "section" if "list" not in _type_name(field.annotation) else "list of sections",
                             "", description))
                walk(f"{key}.", nested)
            else:
                rows.append((key, _type_name(field.annotation), default, description))

    walk("", ExperimentConfig)
    return rows


def config_reference() -> str:
    lines = ["# Run config reference", "",
             "Every key of a run config (`apcir run CONFIG.toml`), generated from the settings records by "
             "`docs/gen_reference.py` (a test fails when this page and the records differ). Sections are TOML "
             "tables: `retrieval.index` is `index` under `[retrieval]`; `[[rerank]]` may repeat.", "",
             "| key | type | default | description |", "|---|---|---|---|"]
    for key, kind, default, description in config_keys():
        lines.append(f"| `{key}` | {_cell(kind)} | {_cell(default)} | {_cell(description)} |")
    return "\n".join(lines) + "\n"


GENERATORS = {"cli": cli_reference, "config": config_reference}


def main(argv: list[str]) -> int:
    stale = []
    for name, generate in GENERATORS.items():
        text = generate()
        if "--check" in argv:
            if not PAGES[name].is_file() or PAGES[name].read_text(encoding="utf-8") != text:
                stale.append(str(PAGES[name]))
        else:
            PAGES[name].parent.mkdir(parents=True, exist_ok=True)
            PAGES[name].write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date (run python docs/gen_reference.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
