"""A stand-in for transformers on the organisers' server's path (see ../README.md): the names its modules
import, each unusable."""

from _unavailable import Unavailable


class AutoTokenizer(Unavailable):
    pass


class AutoModelForCausalLM(Unavailable):
    pass


class BitsAndBytesConfig(Unavailable):
    pass
