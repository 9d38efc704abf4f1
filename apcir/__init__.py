"""apcir: adaptive personalised conversational search on TREC iKAT."""

import os as _os

__version__ = "0.1.0"

# Reproducible numbers: the math libraries must not pick fewer threads when the machine is busy (that changes
# the order of reductions, and so the last bits of a model's scores). Set before any of them is loaded; a
# value the user set is kept.
for _name in ("OMP_DYNAMIC", "MKL_DYNAMIC"):
    _os.environ.setdefault(_name, "FALSE")
