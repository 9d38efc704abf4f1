"""Stage 3b, re-ranking: monoT5, cross-encoders and RankGPT over the top of any run.

    from apcir.reranking.settings import RerankSettings
    from apcir.datasets.store import store_for
    from apcir.reranking.core import Reranking
    settings = RerankSettings(reranker="monot5", model="path/to/monot5", depth=100)
    texts = store_for(apcir.datasets.collection_path("ikat23-provenance")).texts
    reranked, summary = Reranking(settings, texts).with_summary(run, queries)

Re-rankers are registered in :data:`apcir.reranking.registry.RERANKERS`.
"""
