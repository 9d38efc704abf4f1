"""Stage 3b, re-ranking: monoT5, cross-encoders and RankGPT over the top of any run.

    from apcir.reranking.settings import RerankSettings
    from apcir.reranking.stage import rerank_run, texts_for
    settings = RerankSettings(reranker="monot5", model="path/to/monot5", depth=100)
    reranked, summary = rerank_run(run, queries, texts_for(run, 100, "ikat23-provenance"), settings)

Re-rankers are registered in :data:`apcir.reranking.registry.RERANKERS`.
"""
