"""Template queries (queries=templates): a corpus too small for the asked counts is one line saying what to change."""

import numpy as np
import pytest

from vldocir.errors import ConfigError
from vldocir.queries.template_queries import sample_queries


def test_counts_that_cannot_be_placed_are_a_config_error_saying_what_to_change():
    with pytest.raises(ConfigError, match=r"cannot place 3 cross_doc queries in the sec documents.*spec\.documents"):
        sample_queries(np.random.default_rng(0), [], {}, {"sec": {"cross_doc": 3}}, 4, ("Qwen3-VL-32B-Instruct",))
