"""The numeric precision of a local model: the ``dtype`` setting, ``auto | float32 | bfloat16 | float16``.

Every local model (the SPLADE and dense encoders, the PTKB encoder, monoT5, cross-encoders) takes it, from a
config (``retrieval.dtype``, ``rerank.dtype``), a command (``--dtype``) and Python (``dtype=``). ``auto`` is
bfloat16 on a CUDA GPU that computes in it natively (compute capability 8.0 or more: A100, H100, H200, L4,
RTX 30xx and later) and float32 everywhere else, the CPU included, so that a CPU run's numbers never depend
on this setting. bfloat16 and float16 also run on the CPU when asked for (to measure what they change).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from apcir.errors import ApcirError

if TYPE_CHECKING:
    import torch

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
DTYPES: tuple[str, ...] = get_args(Dtype)
CONCRETE: tuple[str, ...] = DTYPES[1:]
DTYPE_HELP = ("auto (bfloat16 on a GPU that supports it, else float32), float32, bfloat16 or float16")


def check_dtype(name: str | None) -> str:
    """``name`` when it is a known precision (None: ``auto``), else a one-line :class:`ApcirError`."""
    value = "auto" if name is None else str(name).strip()
    if value not in DTYPES:
        raise ApcirError(f"dtype {name!r} is not a precision apcir knows: expected {', '.join(DTYPES)}")
    return value


def gpu_supports_bfloat16(device: str) -> bool:
    """Whether ``device`` is a CUDA GPU with native bfloat16 (compute capability 8.0 or more)."""
    import torch

    parsed = torch.device(device)
    if parsed.type != "cuda" or not torch.cuda.is_available():
        return False
    index = parsed.index if parsed.index is not None else torch.cuda.current_device()
    major, _ = torch.cuda.get_device_capability(index)
    return major >= 8


def resolve_dtype(name: str | None, device: str) -> str:
    """The concrete precision (``float32``, ``bfloat16`` or ``float16``) a model on ``device`` runs in."""
    value = check_dtype(name)
    if value != "auto":
        return value
    return "bfloat16" if gpu_supports_bfloat16(device) else "float32"


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a concrete precision name."""
    import torch

    if name not in CONCRETE:
        raise ApcirError(f"dtype {name!r}: expected one of {', '.join(CONCRETE)}")
    return getattr(torch, name)  # type: ignore[no-any-return]


def stored_dtype(recorded: str | None) -> str:
    """The precision an index's passages were encoded in; an index from before apcir recorded it was float32."""
    return recorded or "float32"
