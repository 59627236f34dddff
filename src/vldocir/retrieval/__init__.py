"""Retrievers and retrieval settings: BM25, encoders, the embedding store, exact search, document context.

A retriever turns a benchmark and its queries into a run (:mod:`vldocir.data.runs`); the shared
in-memory form of embeddings is :mod:`vldocir.retrieval.vectors`.
"""
