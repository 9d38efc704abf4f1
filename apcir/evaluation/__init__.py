"""Evaluation: trec_eval numbers through pytrec_eval, significance tests, reports."""

from apcir.evaluation.measures import MEASURE_SETS, Measure, parse_measures
from apcir.evaluation.evaluate import Evaluation, evaluate

__all__ = ["MEASURE_SETS", "Evaluation", "Measure", "evaluate", "parse_measures"]
