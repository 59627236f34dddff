"""The document collectors of App. A.1: Wikipedia, arXiv, PubMed Central (open access) and SEC EDGAR,
each a resumable, rate-limited client writing ``<out_dir>/index.jsonl`` and
``<out_dir>/<doc_id>/index.html`` with its local assets (``vldocir.apps.collect``, conf/collect.yaml).

``http`` is the polite client all four share (rate limit, retries, stored responses), ``index`` the
document index, ``assets`` the localization of a page's images and stylesheets, ``collector`` the
interface of a collector and the run every source goes through; ``wikipedia``, ``arxiv``, ``pubmed``
and ``sec`` hold only what is particular to each source's APIs.
"""

from vldocir.construction.collect.assets import AssetSpec
from vldocir.construction.collect.collector import Collector, Summary, collect, collect_from_config
from vldocir.construction.collect.http import CollectError, FetchError, HttpSpec, MalformedResponse
from vldocir.construction.collect.index import DocumentIndex, IndexFileError, IndexRow, read_index, write_index

__all__ = [
    "AssetSpec",
    "CollectError",
    "Collector",
    "DocumentIndex",
    "FetchError",
    "HttpSpec",
    "IndexFileError",
    "IndexRow",
    "MalformedResponse",
    "Summary",
    "collect",
    "collect_from_config",
    "read_index",
    "write_index",
]
