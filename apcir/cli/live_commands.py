"""``apcir converse`` (apcir in a live run of iKAT's interactive task) and ``apcir simulate-user`` (local
simulated users that speak the same API)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from apcir.cli.common import console, print_json
from apcir.errors import ApcirError
from apcir.settings import secret_from_env

if TYPE_CHECKING:
    from apcir.live.client import SimulationClient


def _token(env: str) -> str:
    token = secret_from_env(env)
    if not token:
        raise ApcirError(f"no API token: set the environment variable {env} (the token is never written anywhere)")
    return token


def _ptkb_file(path: Path) -> dict[str, dict[str, str]]:
    """``--ptkb``: ``{user_id: [statements]}`` (or ``{user_id: {id: statement}}``); a bad file is one line."""
    from apcir.io import read_json

    raw = read_json(path, "PTKB file")
    if not isinstance(raw, dict) or not all(isinstance(v, (list, dict)) for v in raw.values()):
        raise ApcirError("a PTKB file is a JSON object {user_id: [statements]}", path=path)
    return {str(u): ({str(i): str(s) for i, s in enumerate(v, 1)} if isinstance(v, list)
                     else {str(k): str(s) for k, s in v.items()}) for u, v in raw.items()}


def simulate_user_command(
    user: str = typer.Option("replay", "--user", help="replay: a topic's recorded utterances, in order; rubric: the "
                             "2025 rubric questions, one at a time, each answer scored 0-5 by an LLM."),
    topics: str | None = typer.Option(None, "--topics", "-t", help="Topics of the users (default: ikat23-test "
                                      "for replay, ikat25-test for rubric)."),
    conversations: int | None = typer.Option(None, "--conversations", min=1, help="Only the first N conversations."),
    port: int = typer.Option(8765, "--port", min=0, help="Port on 127.0.0.1 (0: any free port)."),
    token_env: str = typer.Option("IKAT_API_TOKEN", "--token-env", help="Variable holding the token it accepts."),
    log: Path | None = typer.Option(None, "--log", help="Every exchange as JSON lines (default: none)."),
    budget: int = typer.Option(100, "--budget", min=0, help="Debug sessions allowed (the organisers allow 100)."),
    send_ptkb: bool = typer.Option(False, "--send-ptkb", help="Send each user's PTKB with every utterance "
                                   "(user_meta.ptkb, the 2026 guidelines' field; the organisers' server sends "
                                   "none)."),
    model: str = typer.Option("gpt-4o-mini", "--model", help="rubric: the LLM that scores the answers."),
    base_url: str | None = typer.Option(None, "--base-url", help="rubric: its OpenAI-compatible server."),
    patience: int = typer.Option(12, "--patience", min=1, help="rubric: the most turns a user takes per topic."),
    uncooperative: bool = typer.Option(False, "--uncooperative", help="rubric: never restate a missed question."),
    style: str = typer.Option("terse", "--style", help="rubric: terse or verbose wording."),
    send_verdicts: bool = typer.Option(False, "--send-verdicts", help="rubric: also send each utterance's "
                                       "user_meta (its rubric, and rubric_score of the answer before it) in the "
                                       "reply; the organisers' server keeps them for its record (run/dump) only."),
) -> None:
    """Serve simulated users on 127.0.0.1 that behave as the organisers' simulation server does (history, status,
    run/session, dump, error codes), to test `apcir converse` against without spending their budget."""
    from apcir import datasets
    from apcir.live.server import Simulation, SimulationServer
    from apcir.live.users import replay_sessions

    if user not in ("replay", "rubric"):
        raise ApcirError(f"--user {user!r}: expected replay or rubric")
    if style not in ("terse", "verbose"):
        raise ApcirError(f"--style {style!r}: expected terse or verbose")
    if log is not None:
        from apcir.io import check_writable, refuse_inputs_as_outputs

        refuse_inputs_as_outputs([log], [topics])
        check_writable(log, "user log")
    turns = datasets.topics(topics or ("ikat23-test" if user == "replay" else "ikat25-test"))
    if user == "replay":
        make = lambda: replay_sessions(turns, conversations)  # noqa: E731
    else:
        from apcir.live.users import LLMScorer, rubric_sessions

        scorer = LLMScorer(model, base_url=base_url, api_key=secret_from_env("OPENAI_API_KEY") or None)

        def make():  # type: ignore[no-untyped-def]
            return rubric_sessions(turns, scorer, conversations=conversations, patience=patience,
                                   cooperative=not uncooperative, style=style)
    simulation = Simulation(make, _token(token_env), log=log, budget=budget, send_ptkb=send_ptkb,
                            send_verdicts=send_verdicts)
    server = SimulationServer(simulation, port)
    console.print(f"simulated users ({user}) at {server.url}; Ctrl-C stops", highlight=False)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()


def converse_command(
    config: str | None = typer.Argument(None, help="The experiment config `apcir run` takes (weights: file or "
                                        "tune); not needed with --check."),
    api: str = typer.Option(..., "--api", help="The simulation API's base URL (http(s)://...)."),
    run_id: str | None = typer.Option(None, "--run-id", help="The run's id (the same id resumes it); not needed "
                                      "with --check."),
    description: str = typer.Option("apcir: adaptive personalised fusion", "--description"),
    track_persona: bool = typer.Option(False, "--track-persona", help="Ask the server to track the persona."),
    debug: bool = typer.Option(False, "--debug", help="Use the debug endpoints (not evaluated; budgeted)."),
    protocol: int = typer.Option(2026, "--protocol", help="2025 or 2026: field names and limits."),
    token_env: str = typer.Option("IKAT_API_TOKEN", "--token-env", help="Variable holding the API token."),
    ptkb: Path | None = typer.Option(None, "--ptkb", help="JSON {user_id: [statements]} when replies carry none."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Run directory (default runs/live/<run id>)."),
    citations: int | None = typer.Option(None, "--citations", min=1, help="Citations sent per answer (default: "
                                         "the protocol's, 10 in 2026, 1,000 in 2025)."),
    response_tokens: int | None = typer.Option(
        None, "--response-tokens", min=1, help="The response's token limit (default: the protocol's, 512 in 2026, "
        "250 in 2025); a lower limit the server names when it refuses an answer for its length is followed."),
    turn_budget: float | None = typer.Option(
        None, "--turn-budget", min=0.1, help="Seconds a turn may take: beyond, the re-rankers are skipped, then an "
        "LLM responder gives way to the extractive one (said in the journal and the summary)."),
    check: bool = typer.Option(False, "--check", help="Only check the token (auth/verify: its team) and show the "
                               "budget left (budget/check: debug sessions, runs); starts nothing, spends nothing, "
                               "writes nothing. Needs --api and the token only."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Play a whole live run: answer each utterance as it arrives, through the stages of `apcir run`; then check
    the server's record of the run against what was sent. With --check, only verify the token and show the
    budget left. Exit codes: docs/guide/converse.md."""
    from apcir.live.client import SimulationClient
    from apcir.live.protocol import protocol_for

    rules = protocol_for(protocol)
    if check:
        _check(SimulationClient(api, _token(token_env), rules, retries=1, retry_delay=0.5), as_json)
        return
    if config is None or run_id is None:
        missing = [name for name, given in (("CONFIG", config), ("--run-id", run_id)) if given is None]
        raise ApcirError(f"apcir converse: missing {' and '.join(missing)} (a run needs the experiment config and "
                         "a run id; only --check goes without them)")
    from dataclasses import replace

    from apcir.experiment.config import load_config, resolve_config_path
    from apcir.experiment.pipeline import config_inputs
    from apcir.io import folder_name_problem, refuse_inputs_inside
    from apcir.live.converse import Converse

    experiment = load_config(resolve_config_path(config))
    problem = folder_name_problem(run_id) if out is None else None
    if problem is not None:  # runs/live/.. would be runs/ itself
        raise ApcirError(f"--run-id {run_id[:60]!r} {problem}: it names the run directory runs/live/RUN_ID; give "
                         "--out DIR for another one")
    target = out or Path("runs") / "live" / run_id
    refuse_inputs_inside(target, [*config_inputs(experiment), str(ptkb) if ptkb else None], "run directory")
    client = SimulationClient(api, _token(token_env), replace(
        rules, citations=citations or rules.citations, response_tokens=response_tokens or rules.response_tokens))
    statements = _ptkb_file(ptkb) if ptkb is not None else {}
    session = Converse(experiment, client, target, run_id=run_id, description=description,
                       track_persona=track_persona, debug=debug, ptkb=statements, turn_budget=turn_budget)
    budgets: dict[str, object] = {}
    try:
        with session.exclusive():  # before anything is asked of the server: one command per run directory
            if debug:
                budgets["before"] = client.budget()
                if not as_json:
                    console.print(f"debug budget before: {budgets['before']}", highlight=False)
            summary = session.play()
            if debug:
                budgets["after"] = client.budget()
                if not as_json:
                    console.print(f"debug budget after: {budgets['after']}", highlight=False)
    except ApcirError as exc:
        cleaned = ApcirError(client.clean(str(exc)))
        cleaned.exit_code = exc.exit_code  # the table of exit codes: which case it was
        raise cleaned from None
    latency = summary.latency()
    record = summary.record
    if as_json:
        print_json({"run_id": summary.run_id, "answered": summary.answered, "resent": summary.resent,
                    "refitted": summary.refitted, "trimmed": summary.trimmed, "topics": summary.topics,
                    "already_complete": summary.already_complete, "earlier": summary.earlier,
                    "response_tokens": summary.response_tokens, "learned_limit": summary.learned_limit,
                    "latency": latency, "skipped": summary.skipped,
                    "record": None if record is None else {"total": record.total, "matched": record.matched,
                                                           "differences": record.differences,
                                                           "error": record.error},
                    **({"debug_budget": budgets} if debug else {})})
    else:
        if summary.already_complete and not summary.answered:
            console.print(f"run {run_id}: already complete ({summary.earlier} utterances answered over "
                          f"{len(summary.earlier_topics)} topics by earlier commands); outputs in {target}/",
                          highlight=False)
        else:
            console.print(f"run {run_id}: {summary.answered} utterances answered over {len(summary.topics)} topics "
                          f"({summary.resent} answers sent again after a restart, {summary.trimmed} responses cut "
                          f"to the token limit); outputs in {target}/", highlight=False)
        if summary.learned_limit is not None:
            console.print(f"response limit: {summary.learned_limit} tokens, the server's (named when it refused an "
                          f"answer for its length; {summary.refitted} answer{'s' if summary.refitted != 1 else ''} "
                          "cut to it and sent again)", highlight=False)
        for stage, values in latency.items():
            console.print(f"  {stage}: p50 {values['p50']:.2f} s, p95 {values['p95']:.2f} s, "
                          f"max {values['max']:.2f} s", highlight=False)
        if record is not None:
            console.print(client.clean(record.line()), highlight=False)
        _point_to_live_report(target)
    if record is not None and not record.ok:
        from apcir.console import warn

        for difference in record.differences:
            warn(client.clean(difference))
        if record.error is not None:
            warn(client.clean(record.line()))
        from apcir.live.errors import RECORD_DIFFERS

        raise typer.Exit(RECORD_DIFFERS)


def _point_to_live_report(target: Path) -> None:
    """After a run whose record (or replies) carry the simulated user's scores: the command that reports them."""
    from apcir.live.verdicts import load_rubrics, read_live

    try:
        scored = read_live(target, load_rubrics()).scored
    except ApcirError:  # nothing to point to: the summary above says what the run did
        return
    if scored:
        console.print(f"the simulated user scored the answers: apcir live-report {target}", highlight=False)


def live_report_command(
    run_or_dump: list[str] = typer.Argument(..., help="Live run directories of apcir converse, run/dump NDJSON "
                                            "files or published 2025 interactive runs (NAME=PATH names one); several "
                                            "are compared with the first."),
    rubrics: Path | None = typer.Option(None, "--rubrics", help="The year's rubrics, {topic: [questions]} (default: "
                                        "2025's, bundled)."),
    threshold: int = typer.Option(3, "--threshold", min=0, max=5, help="A score above it covers the rubric (the "
                                  "organisers' rubric_threshold)."),
    test: str = typer.Option("t-test", "--test", help="Paired over rubrics: t-test, randomisation or bootstrap."),
    correction: str = typer.Option("bonferroni", "--correction", help="Over the runs compared: none, bonferroni "
                                   "or holm."),
    alpha: float = typer.Option(0.05, "--alpha", help="Significance level."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """What the simulated user thought of each answer: per run and topic, the rubrics reached and covered, the
    tries per rubric and the user's 0-5 scores (docs/guide/converse.md, Reading the user's verdicts)."""
    from apcir.cli.common import settings
    from apcir.evaluation.nuggets.gold import run_name_and_path
    from apcir.live.verdicts import RunReport, compare, load_rubrics, read_verdicts, report
    from apcir.metrics import SignificanceSettings

    significance = settings(SignificanceSettings, test=test, correction=correction, alpha=alpha)
    questions = load_rubrics(rubrics)
    reports: list[RunReport] = []
    for given in run_or_dump:
        name, path = run_name_and_path(given)
        found = read_verdicts(Path(path), questions, name)
        if any(r.name == found.name for r in reports):
            found = found.model_copy(update={"name": str(path)})
        reports.append(report(found, questions, threshold))
    comparison = compare(reports, significance)
    if as_json:
        print_json({"threshold": threshold, "rubrics_file": str(rubrics) if rubrics else "bundled 2025",
                    "runs": [r.model_dump(mode="json") for r in reports],
                    "comparison": None if comparison is None else comparison.model_dump(mode="json")})
        return
    from apcir.cli.live_report import print_comparison, print_report

    for one in reports:
        print_report(one)
    if comparison is not None:
        print_comparison(comparison)


def _check(client: SimulationClient, as_json: bool) -> None:
    """``apcir converse --check``: the token's team and the budget left; nothing started or written."""
    from apcir.llm.settings import redact_url

    try:
        access = client.access()
    except ApcirError as exc:
        cleaned = ApcirError(client.clean(str(exc)))
        cleaned.exit_code = exc.exit_code
        raise cleaned from None
    if as_json:
        print_json({"api": redact_url(client.base_url), "team_id": access.team_id,
                    "budget": {kind: left.model_dump() for kind, left in access.budget.remaining.items()}})
        return
    console.print(f"token accepted: team {access.team_id} ({redact_url(client.base_url)})", highlight=False)
    console.print(f"budget left: {access.budget.line()}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("converse")(converse_command)
    app.command("simulate-user")(simulate_user_command)
    app.command("live-report")(live_report_command)
