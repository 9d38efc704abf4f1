"""Checking output paths before any work: a folder apcir can write into, a name the file system takes, and no
output that is one of the command's inputs (or a folder holding them)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from apcir.errors import ApcirError
from apcir.io.read import os_problem


def check_writable(path: Path, what: str = "output") -> Path:
    """Fail early (before any long work) when ``path`` cannot be written: a directory, or an unwritable folder."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise ApcirError(f"{what} is a directory; expected a file path", path=target)
    folder = target.parent
    _writable_folder(folder, f"the folder of the {what}", f"cannot write the {what} here", target)
    if target.exists() and not os.access(target, os.W_OK) and not os.access(folder, os.W_OK):
        raise ApcirError(f"cannot replace the {what}: permission denied", path=target)
    return target


PathLike = Path | str | None


def _resolved(path: PathLike) -> Path | None:
    """An existing input's real path (symlinks and ``..`` resolved), else None (a dataset name, nothing there)."""
    if path is None or str(path) == "":
        return None
    candidate = Path(path).expanduser()
    try:
        return candidate.resolve() if candidate.exists() else None
    except (OSError, RuntimeError):  # a symlink loop
        return None


def _target(path: Path | str) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(Path(path).expanduser()))


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def refuse_inputs_as_outputs(outputs: Iterable[PathLike], inputs: Iterable[PathLike] = (),
                             folders: Iterable[PathLike] = ()) -> None:
    """The one check every writing command makes before any work: no output may be one of its inputs.

    An output is refused when it resolves (symlinks, ``..`` and hard links included) to an input file, or
    lies inside (or is) a folder the command reads or that an index it reads depends on (``folders``: an
    index directory, a run directory). Inputs that do not exist (dataset names) are not files and are
    skipped."""
    files = [(p, r) for p in inputs if (r := _resolved(p)) is not None]
    dirs = [(p, r) for p in folders if (r := _resolved(p)) is not None]
    for out in outputs:
        if out is None or str(out) == "":
            continue
        target = _target(out)
        for given, real in files:
            if real.is_dir():
                dirs.append((given, real))
                continue
            if _same_file(target, real):
                raise ApcirError(f"the output is an input of this command ({given}); writing it would destroy "
                                 "that input: choose another output path", path=out)
        for given, real in dirs:
            if target == real or target.is_relative_to(real):
                raise ApcirError(f"the output lies inside {given}, a folder this command reads; writing there "
                                 "could destroy what it reads: choose a path outside it", path=out)


def refuse_inputs_inside(folder: PathLike, inputs: Iterable[PathLike], what: str = "output folder") -> None:
    """Refuse an output folder that is an input, or that holds an input file (a later overwrite or a file of
    the same name would destroy it): for commands that write a whole folder (an index, a run directory)."""
    if folder is None:
        return
    target = _target(folder)
    for given in inputs:
        real = _resolved(given)
        if real is None:
            continue
        if target == real or real.is_relative_to(target) or (real.is_file() and target.is_relative_to(real)):
            raise ApcirError(f"the {what} holds (or is) an input of this command ({given}); keep inputs outside "
                             "the folders apcir writes", path=folder)


def check_writable_dir(path: Path, what: str = "output folder") -> Path:
    """Like :func:`check_writable`, for a folder apcir will write into."""
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        raise ApcirError(f"{what} is a file; expected a folder", path=target)
    _writable_folder(target, f"the {what}", f"cannot write into the {what}", target)
    return target


def _writable_folder(folder: Path, called: str, refused: str, named: Path) -> None:
    """Make ``folder`` (and its parents) and check that files can be made in it; an error says ``cannot create
    {called}`` or ``{refused}: permission denied`` (naming ``named``)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ApcirError(f"cannot create {called}: {os_problem(exc)}", path=folder) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ApcirError(f"{refused}: permission denied", path=named)


NAME_MAX = 255
"""The longest file or folder name, in bytes of UTF-8, that the common file systems take (ext4, XFS, APFS)."""


def folder_name_problem(name: str) -> str | None:
    """What keeps ``name`` from naming one folder of its own inside another (``runs/NAME``), said after the name
    (``is ...``, ``holds ...``), or None: ``.`` or ``..`` (the folder itself or its parent), a slash, a control
    character, or more than :data:`NAME_MAX` bytes."""
    if name in (".", ".."):
        return "is the folder itself or the one above it, not a folder of its own"
    if "/" in name or "\\" in name:
        return "holds a slash"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character"
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > NAME_MAX:
        return f"is {size} bytes long; a folder's name is at most {NAME_MAX}"
    return None
