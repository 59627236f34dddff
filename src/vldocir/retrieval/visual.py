"""Visual page retrievers (colpali-engine and transformers models).

Declared so that `retriever=colqwen25` composes and sweeps can be planned; the encoders, the
sharded embedding store and exact MaxSim search land with the issue "Retrievers of the paper".
"""

from __future__ import annotations

from vldocir.retrieval.base import NotImplementedYet


class ColVisionRetriever:
    """Multi-vector (late-interaction) retriever over page images, loaded with colpali-engine."""

    def __init__(self, hub_id: str, **settings):
        self.hub_id = hub_id
        self.settings = settings
        raise NotImplementedYet(f"the multi-vector retriever ({hub_id})", "Retrievers of the paper")
