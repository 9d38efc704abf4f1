"""Nugget recall of responses, the way iKAT scores them from 2024 on: gold nuggets (:mod:`.gold`), the matchers
that decide whether a response covers one (:mod:`.matchers`, their registry :mod:`.registry`, the ``learned``
one :mod:`.learned` over :mod:`.features`), recall per run (:mod:`.scores`), human labels (:mod:`.labels`) and
the agreement with them (:mod:`.agreement`, cross-validated by :mod:`.cv`)."""
