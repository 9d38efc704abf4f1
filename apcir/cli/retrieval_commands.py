"""``apcir index build|info`` and ``apcir retrieve``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from apcir.cli.common import (
    TOPICS_FOR_QUERIES,
    checked,
    console,
    entry_options,
    err_console,
    print_json,
    reformulation_records,
    settings,
)
from apcir.contract.reformulations import LIST_NAMES
from apcir.errors import ApcirError
from apcir.io import check_writable, check_writable_dir, refuse_inputs_as_outputs, refuse_inputs_inside
from apcir.retrieval.encoder import DEFAULT_MODEL
from apcir.retrieval.location import index_folder
from apcir.retrieval.precision import DTYPE_HELP, check_dtype
from apcir.retrieval.registry import BACKENDS


def passage_dtype(index: Path) -> str:
    """The precision an index's passages were encoded in (``auto`` when it does not say: not an apcir index)."""
    from apcir.retrieval.backends import locate
    from apcir.retrieval.manifest import read_manifest
    from apcir.retrieval.precision import stored_dtype

    try:
        return stored_dtype(read_manifest(locate(index)).dtype)
    except ApcirError:
        return "auto"


def index_dependencies(index: Path) -> list[Path]:
    from apcir.retrieval.manifest import index_dependencies as dependencies

    return dependencies(index_folder(index))


def backend_options(backend: str | None, options: dict[str, Any] | None, index: Path | None = None) -> Any:
    """The chosen backend's own options from the command's (validated as ``[retrieval]`` validates them: another
    backend's option is refused in one line); the backend is ``--backend``, else the one ``index`` was built with.
    None when neither names one (and no option was given)."""
    from apcir.retrieval.settings import RetrievalSettings

    given = dict(options or {})
    name = backend or (_built_with(index) if index is not None else None)
    if name is None:
        if given:
            raise ApcirError(f"--{next(iter(given)).replace('_', '-')}: which backend's option? give --backend (this "
                             "index has no apcir manifest)")
        return None
    return settings(RetrievalSettings, backend=name, **given).options


def _built_with(index: Path) -> str | None:
    """The backend an index was built with (its manifest's; a bare Lucene index's default), else None."""
    from apcir.retrieval.backends import locate
    from apcir.retrieval.manifest import MANIFEST, is_foreign_lucene, read_manifest
    from apcir.retrieval.registry import BARE_LUCENE

    try:
        folder = locate(index)
    except ApcirError:
        return None
    if (folder / MANIFEST).is_file():
        name = read_manifest(folder).backend
        return name if name in BACKENDS else None
    return BARE_LUCENE if is_foreign_lucene(folder) else None


index_app = typer.Typer(help="Build and inspect retrieval indexes.", no_args_is_help=True)


@index_app.command("build")
@entry_options(BACKENDS)
def build_command(
    collection: str = typer.Option(
        ..., "--collection", "-c", help="Bundled collection (ikat23-provenance) or a JSONL file (either layout)."
    ),
    backend: str = typer.Option("embedded", "--backend", "-b", help=f"One of: {BACKENDS.help()}."),
    out: Path = typer.Option(..., "--out", "-o", help="Index directory to create (e.g. indexes/<name>); for the "
                             "milvus backends milvus:PATH.db (Milvus Lite) or milvus://HOST:PORT/COLLECTION."),
    encoder: str | None = typer.Option(
        None, "--encoder", "-e",
        help="SPLADE model: splade-tiny (bundled), a hub id or a local directory (default naver/splade-v3; with "
        "--vectors: none). Not used by backends without one.",
    ),
    shard: str | None = typer.Option(
        None, "--shard", help="Encode only shard i/N (from 0), e.g. 3/8; re-run without --shard to merge."
    ),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, cuda:1, ... (default: GPU if present)."),
    dtype: str = typer.Option("auto", "--dtype", help=f"Encoder precision: {DTYPE_HELP}. auto continues an "
                              "unfinished build in its recorded precision."),
    batch_size: int = typer.Option(32, "--batch-size", help="Passages per forward pass."),
    doc_max_length: int = typer.Option(256, "--doc-max-length", help="Passage budget in model tokens."),
    chunk_size: int | None = typer.Option(
        None, "--chunk-size", min=1, help="Passages per saved chunk (the unit of resuming; default 10000). An "
        "unfinished build keeps its own; another one given is refused."),
    threads: int = typer.Option(2, "--threads", help="Lucene indexing threads."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing index or unfinished build."),
    vectors_from: Path | None = typer.Option(
        None, "--vectors-from", help="Reuse the passage vectors of this embedded index (same collection and model)."
    ),
    vectors: bool = typer.Option(
        False, "--vectors", help="The collection is a JsonVectorCollection ({id, contents, vector}): index its "
        "vectors as they are, no encoding. With --encoder, tokens map through that model's vocabulary; without, "
        "the index keeps the file's own tokens (search it with retrieve --query-vectors).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    options: dict[str, Any] | None = None,
) -> None:
    """Build an index (resumable; an up-to-date index is left alone). A backend's own options (generated from its
    options model) are given beside the shared ones."""
    from apcir.retrieval.build import build_from_vectors, build_index, check_buildable
    from apcir.retrieval.settings import check_encoder

    checked("--backend", BACKENDS.validate, backend)
    checked("--encoder", check_encoder, encoder)
    check_buildable(BACKENDS.get(backend))
    own = backend_options(backend, options)

    check_dtype(dtype)
    refuse_inputs_inside(index_folder(out), [collection, vectors_from], "index directory")
    check_writable_dir(index_folder(out), "index directory")
    if vectors:
        if shard or vectors_from:
            raise ApcirError("--vectors indexes precomputed vectors: --shard and --vectors-from do not apply")
        result = build_from_vectors(collection, backend, out, encoder, threads=threads, overwrite=overwrite,
                                    chunk_size=chunk_size, options=own)
    else:
        result = build_index(
            collection, backend, out, encoder=encoder or DEFAULT_MODEL, shard=shard, device=device, batch_size=batch_size,
            doc_max_length=doc_max_length, chunk_size=chunk_size, threads=threads, overwrite=overwrite,
            vectors_from=vectors_from, dtype=dtype, options=own,
        )
    if as_json:
        print_json(
            {
                "status": result.status,
                "out": str(result.out_dir),
                "message": result.message,
                "passages_encoded": result.passages_encoded,
                "manifest": result.manifest.model_dump() if result.manifest else None,
            }
        )
        return
    console.print(result.message, highlight=False)


@index_app.command("info")
def info_command(
    index: Path = typer.Argument(..., help="Index directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON."),
) -> None:
    """Show an index's manifest: backend, model, budgets, collection, counts."""
    from apcir.retrieval.backends import locate
    from apcir.retrieval.manifest import read_manifest

    manifest = read_manifest(locate(index))
    if as_json:
        print_json(manifest.model_dump())
        return
    table = Table(title=str(index), show_header=False)
    for key, value in manifest.model_dump().items():
        if key == "collection":
            for sub, subvalue in value.items():
                table.add_row(f"collection.{sub}", str(subvalue))
        elif value is not None:
            table.add_row(key, str(value))
    console.print(table)


@index_app.command("export-vectors")
def export_vectors_command(
    index: Path = typer.Argument(..., help="An embedded index directory (the backend that keeps its vectors)."),
    out: Path = typer.Option(..., "--out", "-o", help="JsonVectorCollection JSONL to write."),
    integer_scale: float | None = typer.Option(
        None, "--integer-scale", help="Write integer impacts round(N * w), as Anserini's -impact indexes want "
        "(e.g. 100); default: float weights.",
    ),
    with_text: bool = typer.Option(False, "--with-text", help="Fill 'contents' with the passage texts."),
) -> None:
    """Write an index's passage vectors as pyserini's JsonVectorCollection (for pyserini's own indexer)."""
    from apcir.retrieval.backends import open_index
    from apcir.retrieval.stage import export_vectors

    check_writable(out, "vector collection")
    refuse_inputs_as_outputs([out], index_dependencies(index), folders=[index_folder(index)])
    count = export_vectors(open_index(index), out, integer_scale=integer_scale, with_text=with_text)
    console.print(f"wrote {count} passage vectors to {out}; index them with pyserini: python -m "
                  "pyserini.index.lucene --collection JsonVectorCollection --input DIR --index OUT --impact "
                  "--pretokenized", highlight=False)


@entry_options(BACKENDS)
def retrieve_command(
    index: Path = typer.Option(..., "--index", "-i", help="Index directory (apcir index, or a Lucene index for BM25; "
                               "for --backend pyterrier the retriever's own), or a Milvus index's location "
                               "(milvus:PATH.db, milvus://HOST:PORT/COLLECTION)."),
    queries: Path | None = typer.Option(
        None, "--queries", "-q", help="TSV turn_id<TAB>query[<TAB>response], or a reformulations JSONL."
    ),
    query_vectors: Path | None = typer.Option(
        None, "--query-vectors", help="Pre-encoded queries instead: a JsonVectorCollection whose ids are turn ids.",
    ),
    field: str | None = typer.Option(
        None, "--field", "-f",
        help=f"For a reformulations JSONL: {' | '.join(LIST_NAMES)}, or several comma-separated (one run each).",
    ),
    topics: str | None = typer.Option(None, "--topics", "-t", help=TOPICS_FOR_QUERIES),
    k: int = typer.Option(1000, "--k", "-k", min=1, help="Depth: passages per turn."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="TREC run file to write; with several fields, a directory (FIELD.run inside) "
        "or a path containing {field}.",
    ),
    tag: str = typer.Option("apcir", "--tag", help="Run tag (sixth column); with several fields, TAG-FIELD."),
    encoder: str | None = typer.Option(
        None, "--encoder", "-e", help="Query encoder; must be the index's model (default: the index's model)."
    ),
    device: str | None = typer.Option(None, "--device", help="cpu, cuda, ... (default: GPU if present)."),
    dtype: str = typer.Option("auto", "--dtype", help=f"Query encoder precision: {DTYPE_HELP}."),
    threads: int = typer.Option(2, "--threads", min=1, help="Lucene search threads."),
    backend_name: str | None = typer.Option(
        None, "--backend", help="For an index without an apcir manifest: lucene-bm25 (a Lucene index, the default), "
        "lucene-splade (an impact index, queried with --encoder) or pyterrier (--retriever's own index).",
    ),
    qr_fusion: Path | None = typer.Option(
        None, "--qr-fusion", help="Query-representation fusion (paper Table 4): with a reformulations JSONL, one "
        "query per turn, the three inputs' vectors summed with the weights of the turn's level in this weights.json.",
    ),
    options: dict[str, Any] | None = None,
) -> None:
    """Retrieve the top-k passages for every query into a TREC run file (one per field). A backend's own options
    (generated from its options model) are given beside the shared ones."""
    from apcir.contract.runs import write_run
    from apcir.retrieval.backends import open_index
    from apcir.retrieval.core import ListRetrieval
    from apcir.retrieval.queries import is_jsonl, load_queries
    from apcir.retrieval.settings import check_encoder

    checked("--backend", BACKENDS.validate, backend_name)
    checked("--encoder", check_encoder, encoder)
    own = backend_options(backend_name, options, index)

    check_dtype(dtype)
    if (queries is None) == (query_vectors is None):
        raise ApcirError("give either --queries (texts) or --query-vectors (pre-encoded queries)")
    if qr_fusion is not None:
        if queries is None:
            raise ApcirError("--qr-fusion takes a reformulations JSONL as --queries")
        _qr_fusion_command(index, queries, qr_fusion, field, k, out, tag, encoder, device, threads, backend_name,
                           dtype, own)
        return
    if query_vectors is not None:
        from apcir.retrieval.stage import search_query_vectors

        if field is not None:
            raise ApcirError("--field chooses an input of a reformulations JSONL; --query-vectors are already "
                             "encoded queries, one per id: drop --field")

        check_writable(out, "run file")
        refuse_inputs_as_outputs([out], [query_vectors, *index_dependencies(index)], folders=[index_folder(index)])
        # the queries come encoded: the model only maps tokens, in the index's own precision (no warning)
        backend = open_index(index, encoder, device=device, threads=threads, backend=backend_name,
                             dtype=passage_dtype(index), options=own)
        run = search_query_vectors(backend, query_vectors, k)
        write_run(run, out, tag=tag, depth=k)
        console.print(f"wrote {out}: {len(run)} turns, {sum(len(h) for h in run.values())} hits (depth {k})",
                      highlight=False)
        return
    assert queries is not None
    fields = [f.strip() for f in field.split(",") if f.strip()] if field else [None]
    if topics is not None:
        if not is_jsonl(queries):
            raise ApcirError("--topics goes with a reformulations JSONL as --queries (a TSV's turns are its own)")
        from apcir import datasets
        from apcir.retrieval.core import list_queries

        for f in fields:
            load_queries(queries, f)  # the same checks of the file and the field
        records = reformulation_records(queries, datasets.topics(topics))
        asked = {f: list_queries(records, f or LIST_NAMES[0]) for f in fields}
        skipped: dict[str, str] = {}
    else:
        query_sets = {f: load_queries(queries, f) for f in fields}
        asked = {f: qs.queries for f, qs in query_sets.items()}
        skipped = next(iter(query_sets.values())).skipped
    for turn, reason in skipped.items():
        err_console.print(f"[yellow]warning:[/] turn {turn} skipped: {reason}", highlight=False)
    keys = {f: (f or "run") for f in fields}
    if len(fields) == 1:
        outs = {keys[fields[0]]: out}
        tags = {keys[fields[0]]: tag}
    else:
        if "{field}" in str(out):
            outs = {keys[f]: Path(str(out).replace("{field}", keys[f])) for f in fields}
        else:
            outs = {keys[f]: out / f"{keys[f]}.run" for f in fields}
        tags = {keys[f]: f"{tag}-{keys[f]}" for f in fields}
    for path in outs.values():
        check_writable(path, "run file")
    refuse_inputs_as_outputs(outs.values(), [queries, topics, *index_dependencies(index)],
                             folders=[index_folder(index)])
    backend = open_index(index, _query_encoder(encoder, backend_name, own), device=device, threads=threads,
                         backend=backend_name, dtype=dtype, options=own)
    started = time.perf_counter()
    runs = ListRetrieval(backend, k, progress=True).search({keys[f]: asked[f] for f in fields})
    seconds = time.perf_counter() - started
    for key, path in outs.items():
        run = runs[key]
        write_run(run, path, tag=tags[key], depth=k)
        empty = [t for t, hits in run.items() if not hits]
        console.print(
            f"wrote {path}: {len(run)} turns, {sum(len(h) for h in run.values())} hits (depth {k})"
            + (f"; {len(empty)} turn(s) with no hit: {', '.join(empty[:5])}" if empty else "")
            + (f"; {len(skipped)} turn(s) skipped" if skipped else ""),
            highlight=False,
        )
    console.print(f"{len(outs)} run(s) in {seconds:.1f} s", highlight=False)


def _qr_fusion_command(index: Path, queries: Path, weights_path: Path, field: str | None, k: int, out: Path,
                      tag: str, encoder: str | None, device: str | None, threads: int,
                      backend_name: str | None, dtype: str = "auto", own: Any = None) -> None:
    from apcir.contract.reformulations import load_reformulations
    from apcir.contract.runs import write_run
    from apcir.contract.weights import load_weights
    from apcir.retrieval.backends import open_index
    from apcir.retrieval.queries import is_jsonl
    from apcir.retrieval.representation import search_fused_representation

    if field is not None or not queries.is_file() or not is_jsonl(queries):
        raise ApcirError("--qr-fusion takes a reformulations JSONL as --queries (all three inputs, no --field)")
    weights = load_weights(weights_path)
    if weights.n_weights != len(LIST_NAMES):
        raise ApcirError(f"--qr-fusion needs {len(LIST_NAMES)} weights per level, the file has {weights.n_weights}",
                         path=weights_path)
    check_writable(out, "run file")
    refuse_inputs_as_outputs([out], [queries, weights_path, *index_dependencies(index)], folders=[index_folder(index)])
    inputs, turn_weights = {}, {}
    for turn, record in load_reformulations(queries).items():
        if record.output is None:
            err_console.print(f"[yellow]warning:[/] turn {turn} skipped: {record.error}", highlight=False)
            continue
        if record.output.level not in weights.levels:
            raise ApcirError(f"turn {turn} has level {record.output.level}, which the weights file lacks",
                             path=weights_path)
        inputs[turn] = [record.list_inputs()[name] for name in LIST_NAMES]
        turn_weights[turn] = tuple(weights.levels[record.output.level].weights)
    backend = open_index(index, _query_encoder(encoder, backend_name, own), device=device, threads=threads,
                         backend=backend_name, dtype=dtype, options=own)
    run = search_fused_representation(backend, inputs, turn_weights, k)
    write_run(run, out, tag=tag, depth=k)
    console.print(f"wrote {out}: {len(run)} turns, query-representation fusion with the weights of {weights_path}",
                  highlight=False)


def _query_encoder(encoder: str | None, backend: str | None, own: Any) -> str | None:
    """The query encoder: ``--encoder``; for a backend whose index has no manifest to name the model (pyterrier
    with ``--query-form toks``), the default SPLADE model when none is given."""
    from apcir.retrieval.encoder import DEFAULT_MODEL

    if encoder is None and backend is not None and BACKENDS.get(backend).build is None and \
            BACKENDS.get(backend).encoder_kind(own) is not None:
        return DEFAULT_MODEL
    return encoder


def register(app: typer.Typer) -> None:
    app.add_typer(index_app, name="index")
    app.command("retrieve")(retrieve_command)


__all__ = ["ApcirError", "register"]
