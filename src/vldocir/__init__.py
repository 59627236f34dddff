"""VL-DocIR: evidence-complete retrieval over visually rich long documents."""

__version__ = "0.1.0"
