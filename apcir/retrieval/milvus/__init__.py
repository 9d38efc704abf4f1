"""The Milvus backends (``milvus``, ``milvus-dense``): writing and searching the collection (:mod:`.index`),
talking to the server (:mod:`.client`), and the collection's requirements, manifest and build state
(:mod:`.collection`)."""
