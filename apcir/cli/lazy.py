"""The commands, loaded when used: ``apcir --help`` imports none of them, ``apcir run`` only its own module.

Each area of the CLI is a module ``apcir/cli/<area>_commands.py`` with a ``register(app)`` function that
registers its commands (``app.command("NAME")(function)``) and sub-apps (``app.add_typer(sub_app,
name="NAME")``). :func:`command_index` reads those registrations, and each command's docstring (or sub-app's
``help``), from the modules' source, without importing them: the command list of ``apcir --help``. Running a
command imports its module and registers it for real; ``tests/cli`` checks that the index and the real
registrations agree.

Boolean flags are shown as flags (``--complete``), not as options that take a ``<bool>`` value.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

ORDER = ("run", "data", "reformulate", "retrieval", "fusion", "rerank", "respond", "export", "eval", "report")
"""``--help`` lists the areas in pipeline order, then any other area."""


@dataclass(frozen=True)
class Entry:
    """A top-level command as its module registers it."""

    name: str
    module: str
    help: str


def _areas() -> list[str]:
    import apcir.cli

    names = [m.name for m in pkgutil.iter_modules(apcir.cli.__path__) if m.name.endswith("_commands")]
    area = lambda n: n[: -len("_commands")]  # noqa: E731
    return sorted(names, key=lambda n: (ORDER.index(area(n)) if area(n) in ORDER else len(ORDER), n))


@functools.cache
def command_index() -> dict[str, Entry]:
    """Every top-level command, in ``--help`` order, read from the modules' source."""
    import apcir.cli

    folder = Path(next(iter(apcir.cli.__path__)))
    commands: dict[str, Entry] = {}
    groups: dict[str, Entry] = {}  # typer lists the commands first, then the groups (apcir index, apcir nuggets)
    for module in _areas():
        for name, help_text, group in _registered(ast.parse((folder / f"{module}.py").read_text(encoding="utf-8"))):
            (groups if group else commands)[name] = Entry(name, module, help_text)
    return commands | groups


def _registered(tree: ast.Module) -> Iterator[tuple[str, str, bool]]:
    """(name, help, is a group) of each ``app.command("NAME")(function)`` and ``app.add_typer(sub, name="NAME")`` of the
    module's ``register``."""
    functions = {node.name: ast.get_docstring(node) or "" for node in tree.body
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    apps = {target.id: _keyword(node.value, "help") for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name) and isinstance(node.value, ast.Call)}
    register = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "register"),
                    None)
    for statement in register.body if register is not None else []:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        inner = call.func
        if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "command"
                and inner.args and isinstance(inner.args[0], ast.Constant) and call.args
                and isinstance(call.args[0], ast.Name)):
            yield str(inner.args[0].value), functions.get(call.args[0].id, ""), False
        elif isinstance(inner, ast.Attribute) and inner.attr == "add_typer" and call.args \
                and isinstance(call.args[0], ast.Name):
            yield str(_keyword(call, "name")), apps.get(call.args[0].id, ""), True


def _keyword(call: ast.expr, name: str) -> str:
    """A call's keyword argument as a string (a literal, or literals joined)."""
    if not isinstance(call, ast.Call):
        return ""
    for keyword in call.keywords:
        if keyword.arg == name:
            try:
                return str(ast.literal_eval(keyword.value))
            except ValueError:
                return ""
    return ""


def flags_as_flags(command: Any) -> Any:
    """``command`` (and its subcommands) with boolean flags shown without a ``<bool>`` value."""
    for param in getattr(command, "params", []):
        _as_flag(param)
    original = getattr(command, "get_help_option", None)
    if original is not None and not getattr(original, "as_flag", False):  # --help, made when first asked for
        def help_option(ctx: Any) -> Any:
            return _as_flag(original(ctx))

        help_option.as_flag = True  # type: ignore[attr-defined]
        command.get_help_option = help_option
    commands = getattr(command, "commands", None)
    for sub in dict.values(commands) if commands is not None else ():  # those loaded (lazy ones: when loaded)
        flags_as_flags(sub)
    return command


def _as_flag(param: Any) -> Any:
    if param is not None and getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
        param.metavar = ""
    return param


class _Commands(dict[str, Any]):
    """The group's commands: reading them all (``.commands.items()``, as the reference pages do) loads them all."""

    def __init__(self, group: LazyGroup):
        super().__init__()
        self.group = group

    def loaded(self, name: str) -> Any:
        """The command if its module is loaded, else None (loads nothing)."""
        return dict.get(self, name)

    def put(self, name: str, command: Any) -> None:
        dict.__setitem__(self, name, command)

    def _all(self) -> None:
        for name in command_index():
            if not dict.__contains__(self, name):
                self.group.load(name)

    def __getitem__(self, name: str) -> Any:
        if not dict.__contains__(self, name):
            self.group.load(name)
        return dict.__getitem__(self, name)

    def _names(self) -> list[str]:
        """Every command, in ``--help`` order (the index's), loaded."""
        self._all()
        return [*command_index(), *(n for n in dict.keys(self) if n not in command_index())]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in command_index()

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def keys(self) -> Any:
        return self._names()

    def values(self) -> Any:
        return [dict.__getitem__(self, n) for n in self._names()]

    def items(self) -> Any:
        return [(n, dict.__getitem__(self, n)) for n in self._names()]


class _Listed(typer.core.TyperCommand):
    """A command as the command list of ``--help`` shows it: its name and help, nothing imported."""


class LazyGroup(TyperGroup):
    """The ``apcir`` group: its commands are imported when one is run (see the module doc)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._commands = _Commands(self)
        self.commands = self._commands
        self._listing = False
        flags_as_flags(self)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(command_index())

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        found = self._commands.loaded(cmd_name)
        if found is not None:
            return found
        entry = command_index().get(cmd_name)
        if entry is None:
            return None
        if self._listing:
            return _Listed(name=cmd_name, help=entry.help, callback=None)
        return self.load(cmd_name)

    def load(self, cmd_name: str) -> Any:
        """Import the module of ``cmd_name`` and register its commands (all of them) on this group."""
        entry = command_index().get(cmd_name)
        if entry is None:
            raise KeyError(cmd_name)
        area = typer.Typer(rich_markup_mode=self.rich_markup_mode)
        importlib.import_module(f"apcir.cli.{entry.module}").register(area)
        for name, command in typer.main.get_group(area).commands.items():
            self._commands.put(name, flags_as_flags(command))
        return self._commands.loaded(cmd_name)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """As typer's, but a misspelt command's suggestions come from the index (no module is imported for them)."""
        suggest, self.suggest_commands = self.suggest_commands, False
        try:
            return super().resolve_command(ctx, args)
        except Exception as exc:
            message = getattr(exc, "message", None)
            if suggest and args and isinstance(message, str):
                from apcir.registry import closest

                near = closest(args[0], command_index())
                if near:
                    exc.message = f"{message.rstrip('.')}. Did you mean {', '.join(repr(n) for n in near)}?"  # type: ignore[attr-defined]
            raise
        finally:
            self.suggest_commands = suggest

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True  # the command list needs names and help only
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
