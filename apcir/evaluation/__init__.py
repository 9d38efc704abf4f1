"""Evaluation: trec_eval numbers through pytrec_eval, significance tests, reports."""

from apcir.evaluation.evaluate import Evaluation, evaluate
from apcir.evaluation.measures import MEASURE_SETS, Measure, parse_measures

__all__ = ["MEASURE_SETS", "Evaluation", "Measure", "evaluate", "parse_measures"]
