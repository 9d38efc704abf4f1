"""`apcir validate` flags everything the organisers' validators flag, year by year: one probe per rule.

Each probe takes a valid submission made by apcir's exporter, breaks one thing,
and expects the problem line that names it. The rules and their sources (the
organisers' irlabamsterdam/iKAT 2023/, 2024/ and 2025/ validators) are cited
in apcir/submission/ikat_json.py and apcir/submission/ikat2025.py; the tag at the end
of a problem says whose rule it is.
"""

from __future__ import annotations

import copy
import json

import pytest

from apcir import datasets
from apcir.contract.reformulations import ReformulationOutput, ReformulationRecord
from apcir.contract.responses import ResponseRecord
from apcir.submission.common import SubmissionInputs
from apcir.submission.stage import build_submission, detect_format, validate_submission

YEARS = {2023: ("ikat23-test", "ikat23"), 2024: ("ikat24-test", "ikat24"), 2025: ("ikat25-test", "ikat25")}
IDS = [f"clueweb22-en0000-00-{i:05d}:0" for i in range(4)]


def _inputs(year: int) -> SubmissionInputs:
    topics, _ = YEARS[year]
    turns = datasets.topics(topics)
    run = {t.turn_id: {pid: 4.0 - n for n, pid in enumerate(IDS)} for t in turns}
    responses = {t.turn_id: ResponseRecord(turn_id=t.turn_id, responder="test", text="First [1]. Second [2].",
                                           passages=IDS[:3], citations=IDS[:2], ptkb_used=list(t.ptkb)[:1])
                 for t in turns}
    records = {t.turn_id: ReformulationRecord(turn_id=t.turn_id, model="test", output=ReformulationOutput(
        reasoning="", level="a", rewrite=t.utterance, response="", third_rewrite=t.utterance, third_response=""))
        for t in turns}
    return SubmissionInputs(run=run, turns=turns, run_name="probe", reformulations=records,
                            passages=dict.fromkeys(IDS, "a passage text"), responses=responses, year=year)


@pytest.fixture(scope="module")
def valid():
    return {year: build_submission(_inputs(year), YEARS[year][1]) for year in YEARS}


def _write(data, year, path):
    if year == 2025:
        path.write_text("".join(json.dumps(line) + "\n" for line in data))
    else:
        path.write_text(json.dumps(data))
    return path


def _problems(data, year, tmp_path, name="sub"):
    topics, fmt = YEARS[year]
    path = _write(data, year, tmp_path / f"{name}{'.jsonl' if year == 2025 else '.json'}")
    return validate_submission(path, datasets.topics(topics), fmt, year)


@pytest.mark.parametrize("year", sorted(YEARS))
def test_the_exported_submission_is_valid(valid, year, tmp_path):
    assert _problems(valid[year], year, tmp_path) == []
    path = _write(valid[year], year, tmp_path / ("x.jsonl" if year == 2025 else "x.json"))
    assert detect_format(path) == YEARS[year][1]


def first_response(data):
    return data["turns"][0]["responses"][0]


def first_passage(data):
    return first_response(data)["passage_provenance"][0]


def set_(path, value):
    """A probe setting data[path...] = value (path of keys and indexes from the top of the JSON object)."""
    def apply(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return apply


def delete(path):
    def apply(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return apply


R = ("turns", 0, "responses", 0)  # the first response of a 2023/2024 run
P = (*R, "passage_provenance")

# (name, mutation, expected part of a problem line, expected tag)
PROBES_JSON = [
    # run.proto / ParseDict (2023 main.py:100-103, 2024 main.py:109-112): unknown fields and wrong types, errors
    ("unknown top-level field", set_(("extra",), 1), "unknown field 'extra'", "validator: error"),
    ("unknown response field", set_((*R, "citations"), {}), "unknown field 'citations'", "validator: error"),
    ("unknown passage field", set_((*P, 0, "rank"), 1), "unknown field 'rank'", "validator: error"),
    ("rank not an int", set_((*R, "rank"), 1.5), "rank must be an integer", "validator: error"),
    ("score not a number", set_((*P, 1, "score"), "high"), "score must be a number", "validator: error"),
    ("used not a bool", set_((*P, 0, "used"), "yes"), "used must be true or false", "validator: error"),
    ("ptkb not a list", set_((*R, "ptkb_provenance"), "1"), "ptkb_provenance must be a list", "validator: error"),
    # main.py:94-98 / 103-107: run_name, run_type, turns present (error)
    ("no run_name", delete(("run_name",)), "run_name is missing", "validator: error"),
    ("no run_type", delete(("run_type",)), "run_type is missing", "validator: error"),
    ("no turns", delete(("turns",)), "turns is missing", "validator: error"),
    # main.py:289-291 / 314-316: zero turns (error)
    ("zero turns", set_(("turns",), []), "turns is missing or empty", "validator: error"),
    # main.py:227-235 / 248-256: run_name empty, run_type unknown (warning)
    ("empty run_name", set_(("run_name",), ""), "run_name is empty", "validator: warning"),
    ("unknown run_type", set_(("run_type",), "interactive"), "run_type 'interactive' is not one of",
     "validator: warning"),
    # main.py:181-216, 244-247 / 194-230, 264-267: the topics' turns exactly (error)
    ("a turn missing", lambda d: d["turns"].pop(1), "missing turn(s)", "validator: error"),
    ("a turn outside the topics", set_(("turns", 1, "turn_id"), "999_1"), "is not in the topics",
     "validator: error"),
    ("a turn number out of range", lambda d: d["turns"][1].update(turn_id=d["turns"][1]["turn_id"].split("_")[0] + "_99"),
     "is not in the topics", "validator: error"),
    # utils.py:25-32 / 26-35: rank 0 or negative (warning)
    ("rank 0", set_((*R, "rank"), 0), "rank 0 is not a positive integer", "validator: warning"),
    ("rank missing", delete((*R, "rank")), "rank 0 is not a positive integer", "validator: warning"),
    ("rank negative", set_((*R, "rank"), -1), "rank -1 is not a positive integer", "validator: warning"),
    # utils.py:35-37 / 38-40: empty text (warning)
    ("empty text", set_((*R, "text"), ""), "empty text", "validator: warning"),
    # utils.py:55-57 / 59-63: passage scores increasing (warning)
    ("scores increase", set_((*P, 2, "score"), 100.0), "is higher than the one before", "validator: warning"),
    # utils.py:60-66 / 66-72: the clueweb22- prefix, one colon (warning)
    ("no clueweb22- prefix", set_((*P, 3, "id"), "doc-1:2"), "is not of the form", "validator: warning"),
    ("two colons", set_((*P, 3, "id"), "clueweb22-en0000-00-00009:1:2"), "is not of the form",
     "validator: warning"),
    # main.py:139-143 / 153-159: no passage used (warning)
    ("nothing used", lambda d: [p.update(used=False) for p in first_response(d)["passage_provenance"]],
     "no passage marked used", "validator: warning"),
    # main.py:145-147 / 161-163: no passage provenance (warning)
    ("no provenance", set_((*R, "passage_provenance"), []), "no passage provenance", "validator: warning"),
    # main.py:148-150 / 164-166: more than 1000 passages (warning)
    ("1001 passages", lambda d: first_response(d).update(passage_provenance=[
        {"id": f"clueweb22-en0000-00-{i:05d}:1", "score": 2000.0 - i, "used": i == 0, "text": "t"}
        for i in range(1001)]), "1001 provenance passages", "validator: warning"),
    # main.py:152-155 / 168-171: no PTKB provenance (warning)
    ("no PTKB provenance", set_((*R, "ptkb_provenance"), []), "no PTKB provenance", "validator: warning"),
    # guidelines 2023 l.96, 2024 l.122: at most 250 words
    ("300 words", set_((*R, "text"), " ".join(["word"] * 299) + " [1]"), "300 words, more than the 250",
     "[guidelines]"),
    # apcir's own
    ("repeated turn", lambda d: d["turns"].append(copy.deepcopy(d["turns"][0])), "appears 2 times", ""),
    ("turn without responses", set_(("turns", 0, "responses"), []), "no responses [apcir]", "[apcir]"),
    ("rank not increasing", lambda d: d["turns"][0]["responses"].append(copy.deepcopy(first_response(d))),
     "rank 1 does not increase", "[apcir]"),
    ("repeated passage", set_((*P, 3, "id"), "clueweb22-en0000-00-00000:0"), "is listed twice", "[apcir]"),
    ("used passage without text", delete((*P, 0, "text")), "is used but has no text", "[apcir]"),
    ("citation outside the list", set_((*R, "text"), "Wrong [7]. First [1]. Second [2]."),
     "citation [7] in the text points outside", "[apcir]"),
    ("citation of an unused passage", set_((*R, "text"), "First [1]. Second [2]. Third [3]."),
     "citation [3] in the text is provenance passage #3, which is not marked as cited", "[apcir]"),
    ("used passage never cited", set_((*R, "text"), "First [1]."),
     "provenance passage #2 is marked as cited but the text never cites [2]", "[apcir]"),
]

PROBES_2023 = [
    # run.proto:24, 37-41: {id, text, score} objects (error)
    ("int statement ids", set_((*R, "ptkb_provenance"), [1]), "must be {id, text, score} objects",
     "validator: error"),
    ("eval_response is not a 2023 field", set_(("eval_response",), True), "unknown field 'eval_response'",
     "validator: error"),
    ("statement id an int", set_((*R, "ptkb_provenance", 0, "id"), 1), "id must be a string", "validator: error"),
    # utils.py:84-86: empty id (error)
    ("empty statement id", set_((*R, "ptkb_provenance", 0, "id"), ""), "statement id is empty", "validator: error"),
    # utils.py:88-90: id not in the profile (error)
    ("statement not in the profile", set_((*R, "ptkb_provenance", 0, "id"), "99"), "is not in the profile",
     "validator: error"),
    # utils.py:92-94: text must be the profile's, exactly (error; missing text too)
    ("statement without text", delete((*R, "ptkb_provenance", 0, "text")), "text of statement 1 is missing",
     "validator: error"),
    ("statement text changed", set_((*R, "ptkb_provenance", 0, "text"), "I like it."), "is not the profile text",
     "validator: error"),
    # utils.py:96-98: PTKB scores increasing (warning)
    ("PTKB scores increase", set_((*R, "ptkb_provenance", 2, "score"), 5.0), "is higher than the one before",
     "validator: warning"),
    ("a turn id of the dashed form", set_(("turns", 0, "turn_id"), "9-1-1"), "is not of the form <conversation>_<turn>",
     "validator: error"),
    ("repeated statement", lambda d: first_response(d)["ptkb_provenance"].append(
        dict(first_response(d)["ptkb_provenance"][-1], score=0.0)), "is listed twice", "[apcir]"),
]

PROBES_2024 = [
    # run.proto:27: int32 statement ids (error); utils.py:91-93: within the profile (error; apcir also rejects 0)
    ("statement objects", set_((*R, "ptkb_provenance"), [{"id": "1"}]), "is not a statement id", "validator: error"),
    ("statement id a word", set_((*R, "ptkb_provenance"), ["a"]), "is not a statement id", "validator: error"),
    ("statement id 99", set_((*R, "ptkb_provenance"), [99]), "statement 99 is not in the profile", "validator: error"),
    ("statement id 0", set_((*R, "ptkb_provenance"), [0]), "statement 0 is not in the profile", "[apcir]"),
    ("eval_response not a bool", set_(("eval_response",), "yes"), "eval_response must be true or false",
     "validator: error"),
    # main.py:200-207: turn ids <int>_<int> (error)
    ("a 2023 turn id", set_(("turns", 0, "turn_id"), "9-1_1"), "is not of the form <int>_<int>", "validator: error"),
    # run.proto:8 + guidelines: a missing eval_response means the responses are not judged
    ("no eval_response", delete(("eval_response",)), "eval_response is missing", "[guidelines]"),
    ("generation-only is a 2025 run type", set_(("run_type",), "generation-only"), "is not one of",
     "validator: warning"),
    ("repeated statement", lambda d: first_response(d)["ptkb_provenance"].append(
        first_response(d)["ptkb_provenance"][0]), "is listed twice", "[apcir]"),
]


def _r25(index=0):
    return lambda d: d[index]["responses"][0]


PROBES_2025 = [
    # l.123-139: metadata (error)
    ("no metadata", lambda d: d[0].pop("metadata"), "metadata must be an object", "validator: error"),
    ("metadata lacks run_id", lambda d: d[0]["metadata"].pop("run_id"), "metadata lacks ['run_id']",
     "validator: error"),
    ("run_type interactive", lambda d: d[0]["metadata"].update(run_type="interactive"),
     "run_type 'interactive' is not one of", "validator: error"),
    ("run_type only_response", lambda d: d[0]["metadata"].update(run_type="only_response"),
     "run_type 'only_response' is not one of", "validator: error"),
    # l.214-216, 266-280: turn ids, missing and additional turns (error)
    ("turn_id not a string", lambda d: d[0].update(turn_id=1), "is not a string", "validator: error"),
    ("a turn missing", lambda d: d.pop(1), "missing turn(s)", "validator: error"),
    ("a turn outside the topics", lambda d: d[1].update(turn_id="99-9_1"), "is not in the topics", "validator: error"),
    # l.141-149: references an object id -> score (error)
    ("references a list", lambda d: d[0].update(references=list(d[0]["references"])),
     "references must be an object", "validator: error"),
    ("a reference score a string", lambda d: d[0]["references"].update({IDS[3]: "low"}),
     "references must be an object", "validator: error"),
    # fixer l.89-117: more than 1000 references (error)
    ("1001 references", lambda d: d[0]["references"].update(
        {f"clueweb22-en0001-00-{i:05d}:1": -float(i) for i in range(1000)}), "1004 references, at most 1000",
     "validator: error"),
    # l.150-153: reference id form (warning)
    ("a reference id of another form", lambda d: d[0].update(references={**d[0]["references"], "doc-1": 0.0}),
     "reference 'doc-1' is not of the form", "validator: warning"),
    # l.155-162: responses a list of objects (error)
    ("responses an object", lambda d: d[0].update(responses={}), "responses must be a list", "validator: error"),
    ("a response not an object", lambda d: d[0].update(responses=["text"]), "not an object", "validator: error"),
    # l.163-168: text, citations and ptkb_provenance present (error)
    ("no text", lambda d: _r25()(d).pop("text"), "text missing or not a string", "validator: error"),
    ("no citations", lambda d: _r25()(d).pop("citations"), "citations missing", "validator: error"),
    ("no ptkb_provenance", lambda d: _r25()(d).pop("ptkb_provenance"), "ptkb_provenance missing", "validator: error"),
    # l.171-177: citations an object id -> score (error)
    ("citations a list", lambda d: _r25()(d).update(citations=[IDS[0]]), "citations must be an object",
     "validator: error"),
    # l.181-184: every citation is a reference (error)
    ("a citation outside the references", lambda d: _r25()(d)["citations"].update({"clueweb22-en0000-00-00099:1": 1.0}),
     "citation clueweb22-en0000-00-00099:1 is not among the references", "validator: error"),
    # l.207-220: a line that is not JSON (error), handled in the test below
    # fixer l.35-59: over 250 words in all the responses of a turn are deleted (apcir: error)
    ("251 words", lambda d: _r25()(d).update(text=" ".join(["word"] * 250) + " [1]"), "251 words, more than the 250",
     "the fixer deletes responses"),
    ("two responses of 200 words", lambda d: d[0]["responses"].extend([
        dict(_r25()(d), text=" ".join(["w"] * 199) + " [1]"), dict(_r25()(d), text=" ".join(["w"] * 199) + " [1]")]),
     "words, more than the 250", "the fixer deletes responses"),
    # guidelines l.638-641 (statement texts) and l.348 (responses without citations are not evaluated)
    ("PTKB provenance as ids", lambda d: _r25()(d).update(ptkb_provenance=[1]), "not a statement text",
     "[guidelines]"),
    ("a PTKB text not in the profile", lambda d: _r25()(d).update(ptkb_provenance=["I am a robot."]),
     "is not a statement of the profile", "[guidelines]"),
    ("no citation", lambda d: _r25()(d).update(citations={}, text="No citation."), "no citations", "[guidelines]"),
    # apcir's own
    ("no responses", lambda d: d[0].update(responses=[]), "no responses", "[apcir]"),
    ("empty text", lambda d: _r25()(d).update(text=" "), "empty text", "[apcir]"),
    ("repeated turn", lambda d: d.append(copy.deepcopy(d[0])), "appears 2 times", ""),
    ("citation [7] of 4 references", lambda d: _r25()(d).update(text="First [1]. Second [2]. Bad [7]."),
     "citation [7] in the text points outside the 4 references", "[apcir]"),
    ("a cited reference never cited in the text", lambda d: _r25()(d).update(text="First [1]."),
     "reference #2 is marked as cited but the text never cites [2]", "[apcir]"),
]

CASES = ([(2023, *p) for p in PROBES_JSON + PROBES_2023] + [(2024, *p) for p in PROBES_JSON + PROBES_2024]
         + [(2025, *p) for p in PROBES_2025])


@pytest.mark.parametrize("year, name, mutate, expected, tag", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_every_rule_has_a_failing_probe(valid, tmp_path, year, name, mutate, expected, tag):
    data = copy.deepcopy(valid[year])
    mutate(data)
    problems = _problems(data, year, tmp_path)
    hits = [p for p in problems if expected in p]
    assert hits, f"{name}: expected a problem with {expected!r}, got {problems[:5]}"
    assert all(tag in p for p in hits), hits
    assert all("\n" not in p for p in problems), "one line per problem"


def test_a_line_that_is_not_json(valid, tmp_path):
    path = tmp_path / "broken.jsonl"
    lines = [json.dumps(line) for line in valid[2025]]
    lines[3] = lines[3][:-5]
    path.write_text("\n".join(lines) + "\n")
    problems = validate_submission(path, datasets.topics("ikat25-test"), "ikat25", 2025)
    assert any(p.startswith("line 4: malformed JSON") and "[2025 validator: error]" in p for p in problems)


@pytest.mark.parametrize("fmt, year, topics", [("ikat24", 2024, "ikat23-test"), ("ikat23", 2023, "ikat24-test"),
                                               ("ikat25", 2025, "ikat23-test")])
def test_a_format_of_another_year_than_the_topics_is_flagged(valid, tmp_path, fmt, year, topics):
    """main.py:22,25,285 / 310: each validator reads only its own year's topics."""
    path = _write(valid[year], year, tmp_path / f"s{'.jsonl' if year == 2025 else '.json'}")
    problems = validate_submission(path, datasets.topics(topics), None, datasets.topics_year(topics))
    assert problems[0].startswith(f"{fmt} is the iKAT {year} format but the topics are iKAT")
    # the verdict is the answer: no turn-by-turn "not in the topics" after it (issue 37: 349 such lines)
    assert len(problems) == 1, problems[1:4]


def test_validate_cli_one_line_per_problem_and_exit_1(valid, tmp_path, run_cli):
    data = copy.deepcopy(valid[2025])
    _r25()(data)["citations"]["clueweb22-en0000-00-00099:1"] = 1.0
    path = _write(data, 2025, tmp_path / "bad.jsonl")
    code, out, err = run_cli("validate", str(path), "--topics", "ikat25-test")
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.startswith("problem:")]
    assert len(lines) == 1 and "citation clueweb22-en0000-00-00099:1 is not among the references" in lines[0]
    assert "[2025 validator: error]" in lines[0]
