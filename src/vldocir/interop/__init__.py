"""The field's formats, both ways: stored runs as mteb result files (and mteb result folders read
back as external rows of the reports), and benchmarks written in the hub layout with a card.

Models from mteb's registry are a retriever like any other (:mod:`vldocir.retrieval.mteb_encoder`).
"""
