"""Shared pieces of the commands: consoles and JSON output."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

console = Console()
err_console = Console(stderr=True)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no colour codes), for piping into other tools."""
    print(json.dumps(data, indent=2, ensure_ascii=False))
