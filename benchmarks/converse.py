"""Benchmark: seconds per turn of `apcir converse`, by stage, on the demo config, against replay users.

The demo's index and weights (`apcir run demo`, reused when it ran before) answer the first
``--conversations`` conversations of ikat23-test, replayed by the local simulated users; once with the
heuristic reformulator and the extractive responder (offline), and, with ``--llm``, with the packaged
SmolLM2 behind llama.cpp's server reformulating and answering (cold cache). Prints p50/p95/max per stage.

    python benchmarks/converse.py [--conversations 2] [--llm]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table


def play(config, turns, folder: Path, label: str):  # type: ignore[no-untyped-def]
    from apcir.live.client import SimulationClient
    from apcir.live.converse import Converse
    from apcir.live.protocol import PROTOCOLS
    from apcir.live.server import Simulation, SimulationServer
    from apcir.live.users import replay_sessions

    token = "benchmark-token"
    with SimulationServer(Simulation(lambda: replay_sessions(turns), token, send_ptkb=True)) as server:
        client = SimulationClient(server.url, token, PROTOCOLS[2026])
        summary = Converse(config, client, folder / label, run_id=label).play()
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--llm", action="store_true", help="also with the local SmolLM2 server (cold cache)")
    args = parser.parse_args()

    import apcir

    apcir.quiet()
    demo = apcir.Experiment.from_config("demo").run()  # the demo's index and weights.json (reused when done)
    base = apcir.Experiment.from_config("demo").config
    weights = {"source": "file", "file": str(demo.layout.weights)}
    config = base.model_copy(update={"fusion": base.fusion.model_copy(
        update={"weights": base.fusion.weights.model_validate(weights), "baselines": False})})
    topics = apcir.topics("ikat23-test")
    chosen = list(dict.fromkeys(t.conversation_id for t in topics))[: args.conversations]
    turns = [t for t in topics if t.conversation_id in chosen]
    runs = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        runs["heuristic + extractive"] = play(config, turns, folder, "offline")
        if args.llm:
            from apcir.llm.local_server import LocalServer

            with LocalServer("smollm2", n_ctx=8192) as server:
                common = {"base_url": server.url, "cache_dir": str(folder / "cache"), "max_prompt_tokens": 7000}
                llm = config.model_copy(update={
                    "reformulator": config.reformulator.model_validate({"method": "smollm2", **common}),
                    "respond": config.respond.model_validate({"responder": "smollm2", **common})})
                runs["SmolLM2 (llama.cpp)"] = play(llm, turns, folder, "llm")
    table = Table(title=f"apcir converse: seconds per turn ({len(turns)} turns, {len(chosen)} conversations, "
                        "demo index, replay users)")
    for column in ("setting", "stage", "p50", "p95", "max"):
        table.add_column(column, justify="left" if column in ("setting", "stage") else "right")
    for name, summary in runs.items():
        for stage, values in summary.latency().items():
            table.add_row(name, stage, f"{values['p50']:.3f}", f"{values['p95']:.3f}", f"{values['max']:.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()
