"""trec_eval's measures through pytrec_eval, and paired significance tests on their per-turn values.

Shared by the stages that need a number: the weight search (fusion) maximises
these measures, and the evaluation stage reports them.
"""

from apcir.metrics.measures import MEASURE_SETS, Measure, parse_measures
from apcir.metrics.significance import Comparison, SignificanceSettings, compare_with, paired_t_tests
from apcir.metrics.trec_eval import Evaluation, check_judged, evaluate

__all__ = ["MEASURE_SETS", "Comparison", "SignificanceSettings", "compare_with", "Evaluation", "Measure", "check_judged", "evaluate", "paired_t_tests",
           "parse_measures"]
