"""The run inspector: `apcir inspect` pages, opened in a real headless browser (Debian's chromium + chromedriver).

``make test`` installs chromium where it can (``make browser``: as root, with apt-get). Without it the browser tests
skip, except under ``APCIR_REQUIRE_BROWSER=1`` (``.ci/run`` sets it), where a skip is a failure."""

from __future__ import annotations

import json

import pytest
from browser import browser, open_page

from apcir import datasets


@pytest.fixture(scope="module")
def two_runs(small, tmp_path_factory):
    """Two small run directories over the same turns: the heuristic reformulator and the manual rewrites."""
    from apcir.experiment.config import ExperimentConfig
    from apcir.experiment.pipeline import run_experiment

    root, collection, index, chosen = small
    base = tmp_path_factory.mktemp("inspect")
    dirs = []
    for llm in ("heuristic", "manual"):
        config = ExperimentConfig.model_validate({
            "name": f"insp-{llm}", "topics": "ikat23-test", "turns": chosen, "output_dir": str(base / llm),
            "reformulator": {"method": llm},
            "retrieval": {"index": str(index), "collection": str(collection), "encoder": "splade-tiny"},
            "fusion": {"weights": {"source": "cv", "folds": 2, "step": 0.1}, "baselines": ["equal", "list-rewrite"]},
            "evaluation": {"qrels": "ikat23-test-provenance"},
        })
        run_experiment(config, progress=False)
        dirs.append(base / llm)
    return dirs


def test_apcir_run_writes_the_inspector_and_its_data_is_complete(two_runs, tmp_path):
    from apcir.evaluation.inspector import gather, write_inspector

    page = two_runs[0] / "inspect.html"
    assert page.exists() and "<script" in page.read_text() and "http" not in page.read_text().split("<script")[0]
    # the run's stage took the runs it had just written from memory; read from their files, the page is the same
    assert write_inspector([two_runs[0]], tmp_path / "again.html").read_bytes() == page.read_bytes()
    data = gather([two_runs[0]])
    judged = [t for t in data["turns"] if t["judged"]]
    assert judged
    view = judged[0]["runs"]["insp-heuristic"]
    assert view["level"] in "abc" and set(view["lists"]) == {"rewrite", "rewrite_response", "third"}
    assert len(view["fused"]) == 10 and view["response"]["cited"]
    assert view["metrics"]["apcir"] and "nDCG@3" in view["metrics"]["apcir"]


@pytest.mark.slow
def test_a_turn_in_a_real_browser(two_runs, tmp_path, run_cli):
    from selenium.webdriver.common.by import By

    page = tmp_path / "i.html"
    code, _, err = run_cli("inspect", str(two_runs[0]), "--out", str(page))
    assert code == 0, err
    refs = {json.loads(line)["turn_id"]: json.loads(line) for line in
            (two_runs[0] / "reformulations.jsonl").read_text().splitlines()}
    qrels = datasets.qrels("ikat23-test-provenance")
    turn = next(t for t in refs if t in qrels)
    driver = browser()
    try:
        open_page(driver, page)
        driver.find_element(By.CSS_SELECTOR, f'#turn-list li[data-turn="{turn}"]').click()
        assert driver.find_element(By.ID, "turn-title").text == f"Turn {turn}"
        shown = {e.get_attribute("data-field"): e.text for e in driver.find_elements(By.CSS_SELECTOR, ".rewrite")}
        assert shown["rewrite"] == " ".join(refs[turn]["output"]["rewrite"].split())
        grades = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".grade")]
        assert "unjudged" in grades and any(g.isdigit() for g in grades)
        citations = driver.find_elements(By.CSS_SELECTOR, ".citation.cited")
        assert citations and "clueweb22" in citations[0].text
        driver.find_element(By.ID, "f-search").send_keys(turn)
        listed = [li.get_attribute("data-turn") for li in driver.find_elements(By.CSS_SELECTOR, "#turn-list li")]
        assert turn in listed and all(turn in t for t in listed)
        driver.save_screenshot(str(tmp_path / "turn.png"))
        assert (tmp_path / "turn.png").stat().st_size > 10_000
    finally:
        driver.quit()


@pytest.mark.slow
def test_comparing_two_runs_in_a_real_browser(two_runs, tmp_path, run_cli):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = tmp_path / "compare.html"
    code, _, err = run_cli("inspect", *map(str, two_runs), "--out", str(page))
    assert code == 0, err
    driver = browser()
    try:
        open_page(driver, page)
        driver.find_element(By.ID, "tab-compare").click()
        Select(driver.find_element(By.ID, "c-a")).select_by_visible_text("insp-heuristic / APCIR")
        Select(driver.find_element(By.ID, "c-b")).select_by_visible_text("insp-manual / APCIR")
        items = driver.find_elements(By.CSS_SELECTOR, "#turn-list li")
        diffs = [abs(float(li.find_elements(By.CSS_SELECTOR, "span")[-1].text)) for li in items]
        assert diffs and diffs == sorted(diffs, reverse=True)
        items[0].click()
        sides = driver.find_elements(By.CSS_SELECTOR, "#compare > div")
        assert len(sides) == 2 and "insp-heuristic" in sides[0].text and "insp-manual" in sides[1].text
        driver.save_screenshot(str(tmp_path / "compare.png"))
    finally:
        driver.quit()


def test_the_page_shows_a_turns_pathways(two_runs, tmp_path):
    """A run directory with a Pathways of Thoughts trace beside its responses: each turn's pathways are in the page."""
    from apcir.evaluation.inspector import gather

    run_dir = two_runs[0]
    first = json.loads((run_dir / "responses.jsonl").read_text().splitlines()[0])["turn_id"]
    trace = run_dir / "responses.pathways.jsonl"
    trace.write_text(json.dumps({"turn_id": first, "pathway": 0, "actions": ["plan", "answer", "finalize"],
                                 "finalized": True, "response": "An answer [1].", "stopped": None}) + "\n"
                     + json.dumps({"turn_id": first, "pathway": 1, "actions": ["plan"], "finalized": False,
                                   "response": None, "stopped": "step 2: no allowed action"}) + "\n"
                     + json.dumps({"turn_id": first, "aspects": ["x"], "method": "mixture", "usage": {}}) + "\n")
    try:
        data = gather([run_dir])
    finally:
        trace.unlink()
    view = next(t for t in data["turns"] if t["id"] == first)["runs"][data["runs"][0]["name"]]
    assert view["pathways"] == [[0, ["plan", "answer", "finalize"], True, "An answer [1]."],
                                [1, ["plan"], False, "(no answer: step 2: no allowed action)"]]
