"""The run inspector: one self-contained HTML page per run directory (or a comparison of several).

``apcir inspect RUN_DIR [RUN_DIR2 ...] --out inspect.html`` (and ``apcir run``, which writes ``inspect.html``
into every run directory) gathers, per turn:

* the utterance, its history, and the PTKB with the statements the reformulation used marked;
* per run directory: the level and the three reformulations, the top 10 of the three lists, the fused top 10
  and the re-ranked ones, each hit with its rank, score and qrels grade (unjudged marked), the response with
  every citation resolved to its passage text, and the turn's value of every measure for every system;
* the top 10 of every system, for the comparison view.

The page needs no server and no network (no CDN): the data is one JSON object inside it, the script and
styles are inline, written by hand here (about 200 lines) because the peers (diffir) need a server or a
template package. Filters: conversation, level, and a search over turn ids and text. The comparison view
(in the manner of diffir) picks two systems (of one run directory or of two) and a measure, sorts the turns
by the per-turn difference, and shows the two rankings side by side with the judged passages marked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apcir import datasets
from apcir.contract.fusion import load_fusion_record
from apcir.contract.layout import RunLayout
from apcir.contract.records import Run
from apcir.contract.reformulations import LIST_NAMES, load_reformulations
from apcir.contract.responses import load_responses
from apcir.contract.runs import load_run, ranking
from apcir.contract.stage import StageContext, StageResult
from apcir.errors import ApcirError
from apcir.evaluation.results import read_metrics
from apcir.evaluation.stage import RunPageStage
from apcir.io import iter_jsonl, read_json, write_text

TOP = 10
TEXT_CHARS = 700
INSPECT_FILE = "inspect.html"


def _top(run: dict[str, dict[str, float]], turn: str, passages: dict[str, int]) -> list[list[Any]]:
    hits = ranking(run.get(turn, {}), TOP)
    return [[passages.setdefault(pid, len(passages)), round(score, 4)] for pid, score in hits]


def _nuggets(metrics: Any, turn: str) -> list[list[Any]]:
    """The turn's gold nuggets as [text, covered] (``[evaluation] nuggets``), or none."""
    info = metrics.responses.nuggets if metrics is not None and metrics.responses is not None else None
    if info is None or turn not in info.total:
        return []
    from apcir.evaluation.nuggets.gold import load_nuggets

    gold = _nugget_sets.get(info.nuggets)
    if gold is None:
        try:
            gold = _nugget_sets.setdefault(info.nuggets, load_nuggets(info.nuggets).by_turn)
        except ApcirError:
            return []
    covered = set(info.covered.get(turn, []))
    return [[n.text, n.nugget_id in covered] for n in gold.get(turn, [])]


_nugget_sets: dict[str, Any] = {}


def _pathways(path: Path) -> dict[str, list[list[Any]]]:
    """The Pathways of Thoughts trace by turn: [pathway, actions, finalized, response or stop reason]. A turn
    answered again (after a kill) has its lines twice: the last ones count."""
    if not path.exists():
        return {}
    latest: dict[tuple[str, int], list[Any]] = {}
    for _, row in iter_jsonl(path, "Pathways of Thoughts trace", skip_malformed=True):  # a killed run tears a line
        if "pathway" in row:
            latest[(str(row.get("turn_id")), int(row["pathway"]))] = [
                row["pathway"], row.get("actions", []), bool(row.get("finalized")),
                row.get("response") or f"(no answer: {row.get('stopped')})"]
    by_turn: dict[str, list[list[Any]]] = {}
    for (turn, _), entry in sorted(latest.items()):
        by_turn.setdefault(turn, []).append(entry)
    return by_turn


def passage_texts(config: dict[str, Any], ids: Iterable[str]) -> dict[str, str]:
    """The texts of passages ``ids`` from the collection of ``config``'s ``[retrieval]`` (none it cannot reach)."""
    from apcir.retrieval.settings import RetrievalSettings
    from apcir.retrieval.stage import passage_texts_for

    try:
        settings = RetrievalSettings.model_validate(config.get("retrieval") or {})
        store = passage_texts_for(settings, Path(settings.index))
    except (ApcirError, ValueError, OSError):
        return {}
    if store is None:
        return {}
    try:
        return store.texts(ids)
    except (ApcirError, OSError):
        return {}


def gather(run_dirs: list[Path], read_run: Callable[[Path], Run] = load_run) -> dict[str, Any]:
    """The page's data: every turn of every run directory, in the topics' order. ``read_run`` reads a run file
    (an experiment's stage passes the runs it wrote in this process, as they were written)."""
    if not run_dirs:
        raise ApcirError("give at least one run directory")
    runs: list[dict[str, Any]] = []
    passages: dict[str, int] = {}
    per_run: list[dict[str, Any]] = []
    grades: dict[str, dict[str, int]] = {}
    order: list[Any] = []
    for run_dir in run_dirs:
        if not (run_dir / "config.json").exists():
            raise ApcirError("not a run directory of `apcir run` (no config.json)", path=run_dir)
        config = read_json(run_dir / "config.json", "run config")
        name = str(config.get("name") or run_dir.name)
        if any(r["name"] == name for r in runs):
            name = str(run_dir)
        metrics = read_metrics(run_dir) if (run_dir / "metrics.json").exists() else None
        if metrics is not None and not grades:
            grades = datasets.qrels(metrics.qrels)
        turns = datasets.select_turns(str(config.get("topics")), config.get("turns"))
        if not order:
            order = turns
        records = load_reformulations(run_dir / "reformulations.jsonl") \
            if (run_dir / "reformulations.jsonl").exists() else {}
        layout = RunLayout(run_dir)
        on_disk = layout.list_runs()
        lists = {f: read_run(on_disk[f]) for f in LIST_NAMES if f in on_disk}
        record = load_fusion_record(layout.fusion_record) if layout.fusion_record.exists() else None
        systems = {name: read_run(path) for name, path in layout.system_runs(record).items()}
        fused = read_run(run_dir / "fused.run") if (run_dir / "fused.run").exists() else systems.get("apcir", {})
        responses = load_responses(run_dir / "responses.jsonl") if (run_dir / "responses.jsonl").exists() else {}
        pathways = _pathways(run_dir / "responses.pathways.jsonl")
        measures = metrics.measures if metrics is not None else []
        runs.append({"name": name, "measures": measures,
                     "systems": [s for s in systems if metrics is None or s in metrics.systems] or list(systems),
                     "labels": {s: r.label for s, r in metrics.systems.items()} if metrics else {}})
        per_run.append({"config": config, "records": records, "lists": lists, "systems": systems, "fused": fused,
                        "responses": responses, "metrics": metrics, "dir": run_dir, "pathways": pathways})
    shown: set[int] = set()
    turns_out = []
    for turn in order:
        entry: dict[str, Any] = {
            "id": turn.turn_id, "conversation": turn.conversation_id, "utterance": turn.utterance,
            "history": [[h.utterance, h.response] for h in turn.history], "ptkb": dict(turn.ptkb),
            "judged": turn.turn_id in grades, "runs": {},
        }
        for run, data in zip(runs, per_run):
            record = data["records"].get(turn.turn_id)
            output = record.output if record is not None else None
            view: dict[str, Any] = {
                "level": output.level if output else None,
                "rewrites": ({"reasoning": output.reasoning, "rewrite": output.rewrite, "response": output.response,
                              "third_rewrite": output.third_rewrite, "third_response": output.third_response}
                             if output else {}),
                "used": list(output.ptkb_used) if output else [],
                "error": record.error if record is not None and output is None else None,
                "lists": {f: _top(r, turn.turn_id, passages) for f, r in data["lists"].items()},
                "fused": _top(data["fused"], turn.turn_id, passages),
                "reranked": {s: _top(r, turn.turn_id, passages) for s, r in data["systems"].items() if "+" in s},
                "systems": {s: _top(r, turn.turn_id, passages) for s, r in data["systems"].items()},
                "metrics": ({s: res.per_turn.get(turn.turn_id, {}) for s, res in data["metrics"].systems.items()}
                            if data["metrics"] is not None else {}),
            }
            answer = data["responses"].get(turn.turn_id)
            if answer is not None:
                view["response"] = {"text": answer.text, "status": answer.status, "error": answer.error,
                                    "passages": [passages.setdefault(p, len(passages)) for p in answer.passages],
                                    "cited": [passages.setdefault(p, len(passages)) for p in answer.citations],
                                    "ptkb_used": list(answer.ptkb_used)}
                shown.update(view["response"]["passages"])
                view["nuggets"] = _nuggets(data["metrics"], turn.turn_id)
                view["pathways"] = data["pathways"].get(turn.turn_id, [])
            for hits in [view["fused"], *view["reranked"].values(), *view["lists"].values()]:
                shown.update(index for index, _ in hits)
            entry["runs"][run["name"]] = view
        turns_out.append(entry)
    ids = {index: pid for pid, index in passages.items()}
    texts: dict[str, str] = {}
    wanted = {ids[i] for i in shown}
    for data in per_run:
        missing = wanted - set(texts)
        if missing:
            texts.update(passage_texts(data["config"], missing))
    return {
        "runs": runs,
        "turns": turns_out,
        "passages": [ids[i] for i in range(len(ids))],
        # in the passages' order, never in the order a set of ids was asked in (which differs between processes)
        "texts": {index: trimmed(texts[pid]) for index, pid in sorted(ids.items()) if pid in texts},
        "grades": {t: {passages[p]: g for p, g in judged.items() if p in passages} for t, judged in grades.items()},
    }


def trimmed(text: str) -> str:
    """A passage's text as the page shows it (its first :data:`TEXT_CHARS` characters)."""
    return text[:TEXT_CHARS] + ("..." if len(text) > TEXT_CHARS else "")


def write_inspector(run_dirs: list[Path], out: Path, read_run: Callable[[Path], Run] = load_run) -> Path:
    """Write the page for ``run_dirs`` to ``out``; returns it (``read_run``: see :func:`gather`)."""
    return write_page(gather(run_dirs, read_run), out)


def write_page(data: dict[str, Any], out: Path) -> Path:
    """The page of ``data`` (:func:`gather`'s shape; a live run's: :mod:`apcir.live.inspect`) written to ``out``."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    title = " vs ".join(r["name"] for r in data["runs"])
    write_text(out, PAGE.replace("__TITLE__", _escape(title)).replace("__DATA__", payload))
    return out


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


PAGE = Path(__file__).with_name("inspector.html").read_text(encoding="utf-8")


@dataclass
class InspectStage(RunPageStage):
    """``inspect.html``: the run inspector of one run directory, whose files are those it shows."""

    template: Path

    @property
    def name(self) -> str:
        return "inspect"

    def run(self, context: StageContext) -> StageResult:
        return StageResult(str(write_inspector([self.run_dir], self.out, context.read_run)))


TEMPLATE = Path(__file__).with_name("inspector.html")
