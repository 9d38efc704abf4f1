"""What the stand-ins hand out: a class that cannot be used."""


class Unavailable:
    """A model class of the server's model stack, which the ``dummy`` task never builds."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{type(self).__name__}: a stand-in (apcir's tests run the server's dummy task only)")

    @classmethod
    def from_pretrained(cls, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{cls.__name__}.from_pretrained: a stand-in (apcir's tests run the dummy task only)")
