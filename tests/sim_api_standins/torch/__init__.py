"""A stand-in for torch on the organisers' server's path (see ../README.md): importing works, using fails."""


def __getattr__(name: str) -> object:
    raise RuntimeError(f"torch.{name}: a stand-in (apcir's tests run the server's dummy task only)")
