"""A stand-in for sentence_transformers on the organisers' server's path (see ../README.md)."""

from _unavailable import Unavailable


class SentenceTransformer(Unavailable):
    pass
