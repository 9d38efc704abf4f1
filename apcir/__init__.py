"""apcir: adaptive personalised conversational search on TREC iKAT."""

__version__ = "0.1.0"
