"""The figure modules of chapters 6-8 draw from their recorded JSON (what `python -m
sitp.examples.<module>` does for the book), into a temporary folder."""

import json

from sitp.examples import compile_figures, distributed_figures, inference_figures, posttrain_figures


def _png(path):
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_posttrain_figures(tmp_path):
    run = posttrain_figures.load()  # the demo's seeds
    for seed in run["runs"]:
        assert [s["stage"] for s in seed["stages"]] == ["base", "pretrain", "sft", "rl"]
    assert _png(posttrain_figures.draw_stages(run, tmp_path / "stages.png"))
    pipeline = posttrain_figures.load(posttrain_figures.PIPELINE_JSON)
    assert [s["stage"] for s in pipeline["stages"]] == ["pretrain", "midtrain", "sft", "rl"]
    assert _png(posttrain_figures.draw_pipeline(pipeline, tmp_path / "pipeline.png"))
    seeds = posttrain_figures.load(posttrain_figures.PIPELINE_SEEDS_JSON)
    assert len(seeds["runs"]) >= 3 and seeds["runs"][0]["record"].endswith(
        "posttrain-pipeline.json"
    )
    assert _png(posttrain_figures.draw_pipeline(pipeline, tmp_path / "seeds.png", seeds))
    assert _png(posttrain_figures.draw_pipeline_reward(pipeline, tmp_path / "pipe-reward.png"))


def test_distributed_figures(tmp_path):
    assert _png(distributed_figures.draw_bandwidth(distributed_figures.load_collectives(),
                                                   tmp_path / "bw.png"))  # fmt: skip
    assert _png(distributed_figures.draw_ring(tmp_path / "ring.png"))
    ddp = json.loads(distributed_figures.DDP_JSON.read_text())
    assert _png(distributed_figures.draw_timeline(ddp, tmp_path / "timeline.png"))


def test_compile_figures(tmp_path):
    bench = json.loads(compile_figures.BENCH_JSON.read_text())
    assert _png(compile_figures.draw_bytes(bench, tmp_path / "bytes.png"))


def test_inference_figures(tmp_path):
    """5.4's roofline: the decode steps of kv-cache.json under its roofs, at the intensity
    that per_token gives (half an operation per byte at batch 1, for this model)."""
    bench = json.loads(inference_figures.BENCH_JSON.read_text())
    points = inference_figures.decode_points(bench)
    assert {(p["library"], p["batch"]) for p in points} == {
        (lib, b) for lib in ("sitp", "torch") for b in (1, bench["args"]["batch"])
    }
    assert abs(points[0]["intensity"] - 0.5) < 0.01
    for p in points:  # below the memory roof: the record's point of the page
        assert 0 < p["gflops"] < bench["roofs"]["dram_1"] * p["intensity"]
    assert _png(inference_figures.draw_roofline(bench, tmp_path / "roofline.png"))
