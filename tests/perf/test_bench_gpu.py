"""perf/bench_gpu.py: its FLOP counts and projection arithmetic against hand-computed cases, and the
script end to end in its CPU smoke mode, so that it cannot rot (its figures are not checked: they
depend on the machine, and on CPU they mean nothing)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO_ROOT


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", REPO_ROOT / "perf" / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def test_encode_flops_of_a_one_layer_qwen25_vl_by_hand():
    from transformers import Qwen2_5_VLConfig

    config = Qwen2_5_VLConfig(
        text_config={
            "hidden_size": 8,
            "intermediate_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "vocab_size": 32,
        },
        vision_config={
            "depth": 1,
            "hidden_size": 4,
            "intermediate_size": 6,
            "num_heads": 1,
            "out_hidden_size": 8,
            "window_size": 112,
            "fullatt_block_indexes": [0],
        },
    )
    # 4 image tokens = 16 patches of 3 x 2 x 14 x 14 = 1176 values; 6 other tokens; 10 in the LM.
    patch_embedding = 2 * 16 * 1176 * 4
    vision_block = 2 * 16 * (4 * 4 * 4 + 3 * 4 * 6)  # qkv (3 d^2) + proj (d^2), gated MLP
    vision_attention = 4 * 16 * 16 * 4  # full-attention block: every patch against the 16
    merger = 2 * 4 * (16 * 16 + 16 * 8)  # 4 merged tokens of 4 x 4 = 16 wide
    lm_dense = 2 * 10 * (8 * 8 + 2 * 8 * 4 + 8 * 8 + 3 * 8 * 16)  # q (2 heads x 4), k and v (1 KV head), o, gated MLP
    lm_attention = 4 * 10 * 10 * 8
    projection = 2 * 10 * 8 * 128
    expected = patch_embedding + vision_block + vision_attention + merger + lm_dense + lm_attention + projection
    assert expected == 197_248
    assert bench.encode_flops(config, 4, 6) == expected
    assert bench.encode_flops(config, 0, 6) == 2 * 6 * 576 + 4 * 6 * 6 * 8 + 2 * 6 * 8 * 128  # a query: no vision

    config.vision_config.fullatt_block_indexes = []  # windowed: 112-pixel windows of 8 x 8 = 64 patches
    assert bench.encode_flops_parts(config, 32, 0)["vision_attention"] == 4 * 128 * 64 * 4
    assert bench.encode_flops_parts(config, 4, 0)["vision_attention"] == 4 * 16 * 16 * 4  # fewer patches than a window


def test_encode_flops_of_a_one_layer_paligemma_by_hand():
    from transformers import GemmaConfig, PaliGemmaConfig, SiglipVisionConfig

    config = PaliGemmaConfig(
        vision_config=SiglipVisionConfig(
            hidden_size=4, intermediate_size=6, num_hidden_layers=1, num_attention_heads=1, image_size=28, patch_size=14
        ),
        text_config=GemmaConfig(
            hidden_size=8,
            intermediate_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=4,
            vocab_size=32,
        ),
        vocab_size=32,
        hidden_size=8,
        projection_dim=8,
    )
    # 28 / 14 = 2 x 2 = 4 patches, one LM token each; 2 other tokens; 6 in the LM.
    expected = (
        2 * 4 * 588 * 4  # patch embedding (3 x 14 x 14 pixels)
        + 2 * 4 * (4 * 4 * 4 + 2 * 4 * 6)  # q, k, v, o + MLP (fc1, fc2)
        + 4 * 4 * 4 * 4  # attention over the 4 patches
        + 2 * 4 * 4 * 8  # multi-modal projector
        + 2 * 6 * 576
        + 4 * 6 * 6 * 8  # the Gemma layer, as above
        + 2 * 6 * 8 * 128
    )  # custom_text_proj; no LM head logits (the encoder runs ColPali without its LM head)
    assert expected == 40_576
    assert bench.encode_flops(config, 4, 2) == expected


def test_maxsim_flops_and_project_hours_by_hand():
    assert bench.maxsim_flops(2, 3, 5, 7, 11) == 2 * 2 * 3 * 5 * 7 * 11
    scale = {"pages": 3600, "queries": 7200, "documents": 360}
    search_flops = 2 * 7200 * 25 * 3600 * 100 * 128
    hours = bench.project_hours(
        s_per_page=2.0,
        s_per_query=0.5,
        search_tflops=search_flops / 7200 / 1e12,
        page_tokens=100,
        query_tokens=25,
        context_s_per_doc=10.0,
        scale=scale,
    )
    # encode: 3600 x 2 s + 7200 x 0.5 s = 3 h; search: 7200 s = 2 h; context: 360 x 10 s = 1 h
    assert hours == pytest.approx({"encode_h": 3.0, "search_h": 2.0, "context_h": 1.0, "total_h": 6.0})


def test_projection_uses_measured_rates_and_flop_ratios():
    config = bench.model_config(bench.PUBLISHED["colqwen25"])
    encode = {"best": {"pages_per_s": 10.0}, "visual_tokens": 768, "other_tokens": 11}
    rows = {
        r["model"]: r
        for r in bench.projection(
            "colqwen25",
            config,
            encode,
            {"queries_per_s": 100.0, "mean_tokens": 25},
            {"tflops": 20.0, "page_tokens": 768},
            {"s_per_doc": 0.01},
            smoke=False,
        )
    }
    assert set(rows) == {"colpali13", "colqwen25", "colnomic7b"}
    measured, nomic, colpali = rows["colqwen25"], rows["colnomic7b"], rows["colpali13"]
    assert measured["basis"] == "measured" and measured["encode_flop_ratio"] == pytest.approx(1.0)
    assert measured["encode_h"] == pytest.approx((388_548 / 10 + 271_760 / 100) / 3600)
    assert measured["search_h"] == pytest.approx(2 * 271_760 * 25 * 388_548 * 779 * 128 / 20e12 / 3600)
    assert measured["context_h"] == pytest.approx(29_641 * 0.01 * 779 / 768 / 3600)
    assert nomic["basis"].startswith("FLOP ratio") and 1.5 < nomic["encode_flop_ratio"] < 2  # same vision tower, 7B LM
    assert nomic["encode_h"] > measured["encode_h"] and nomic["search_h"] == pytest.approx(measured["search_h"])
    assert colpali["page_tokens"] == 1030 and colpali["search_h"] == pytest.approx(measured["search_h"] * 1030 / 779)


@pytest.mark.slow
def test_cpu_smoke_run_reports_every_section(tmp_path):
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        [sys.executable, "perf/bench_gpu.py", "--cpu-smoke", "--json", str(out), "--tmp", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Summary:" in done.stdout and "Projection" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["config"]["cpu_smoke"] and figures["device"].startswith("CPU")
    assert figures["cuda_initialized"] is False  # the smoke mode never touches CUDA

    encode = figures["encode"]
    assert len(encode["sweep"]) == 4 and encode["best"]["pages_per_s"] > 0 and encode["best"]["mfu"] > 0
    assert encode["visual_tokens"] > 0 and encode["flops_per_page"] > 0
    assert set(encode["bottleneck"]["stages_pages_per_s"]) == {"decode", "processor", "forward"}
    assert encode["flop_check"]["dense_ratio"] == pytest.approx(1.0, rel=1e-6)  # matrix products and convolutions

    queries = figures["queries"]
    assert queries["queries_per_s"] > 0 and 15 <= queries["mean_tokens"] <= 35

    search, residency = figures["search"], figures["residency"]
    assert search["tflops"] > 0 and search["matmul_tflops"] > 0 and search["matmul_ratio"] > 0
    assert search["pages_searched"] == search["store_pages"] == 300 and len(search["one_shard"]) == 3
    assert residency["same_top"] and len(residency["streamed_s"]) == len(residency["resident_s"]) == 2

    context = figures["context"]
    assert context["n_ctx"] == 256 and context["s_per_doc"] > 0 and context["faiss_cpu_1_thread_s_per_doc"] > 0

    rows = {r["model"]: r for r in figures["projection"]}
    assert set(rows) == {"colpali13", "colqwen25", "colnomic7b"}
    for row in rows.values():
        assert row["total_h"] == pytest.approx(row["encode_h"] + row["search_h"] + row["context_h"])
        assert "smoke" in row["basis"] and row["paper_gpu_hours"] == 100
