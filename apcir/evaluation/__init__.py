"""The evaluation stage: every system's trec_eval numbers (``metrics.json``), comparisons and reports."""
