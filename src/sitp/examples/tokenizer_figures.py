"""The figure and recorded numbers of chapter 5.1, the byte-level BPE tokenizer.

* ``tokenizer-merges.png``: on the left, bytes per token on tinyshakespeare as merges
  grow the vocabulary from 256 to 4,352 tokens (:func:`compression_curve`: one training,
  its first merges taken in turn); on the right, the training times of
  ``scripts/bench_tokenizer.py`` beside Hugging Face ``tokenizers``' at four sizes,
  read from ``tokenizer-bench.json``, which that script writes with ``--record``.

Redraw from the repository root (the corpus through ``sitp.data``)::

    python -m sitp.examples.tokenizer_figures
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sitp.data import load_tinyshakespeare
from sitp.tokenizers import BPETokenizer

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[2] / "docs" / "assets" / "part3"
BENCH_JSON = HERE / "tokenizer-bench.json"
CURVE_SIZES = (256, 272, 288, 320, 384, 512, 768, 1024, 1280, 1792, 2304, 3328, 4352)


def _matplotlib():
    import matplotlib  # late: matplotlib is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # late: matplotlib is slow to import

    return plt


def truncated(tok: BPETokenizer, vocab_size: int) -> BPETokenizer:
    """The tokenizer of the first ``vocab_size - 256`` merges: what training to that size
    would have learned, since training only ever adds merges at the end."""
    return BPETokenizer(tok.merges[: vocab_size - 256], pattern=tok.pattern)


def compression_curve(text: str, vocab_sizes=CURVE_SIZES) -> list[tuple[int, float]]:
    """(vocabulary size, bytes per token of ``text``) from one training to the largest size."""
    tok = BPETokenizer.train(text, max(vocab_sizes))
    num_bytes = len(text.encode("utf-8"))
    return [(v, num_bytes / len(truncated(tok, v).encode_ordinary(text))) for v in vocab_sizes]


def draw(curve, bench: dict | None, path: Path) -> Path:
    """The figure: bytes per token against vocabulary size, and the timed trainings."""
    plt = _matplotlib()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), width_ratios=(3, 2))
    sizes, ratios = zip(*curve)
    left.plot(sizes, ratios, "o-", color="C0", label="sitp BPE (GPT-4 pre-split)")
    if bench:
        rows = bench["rows"]
        left.plot(
            [r["vocab_size"] for r in rows],
            [r["hf_bytes_per_token"] for r in rows],
            "s--",
            color="C1",
            label="HF tokenizers BPE (GPT-2 byte-level pre-split)",
        )
    left.set_xscale("log", base=2)
    left.set_xticks([256, 512, 1024, 2048, 4096], ["256", "512", "1024", "2048", "4096"])
    left.set_xlabel("vocabulary size (256 bytes + merges)")
    left.set_ylabel("bytes per token, tinyshakespeare")
    left.grid(alpha=0.3)
    left.legend(loc="lower right", fontsize=8)
    if bench:
        labels = [str(r["vocab_size"]) for r in rows]
        x = range(len(rows))
        right.bar([i - 0.2 for i in x], [r["train_s"] for r in rows], 0.4, label="sitp")
        right.bar([i + 0.2 for i in x], [r["hf_train_s"] for r in rows], 0.4, label="HF tokenizers")
        right.set_xticks(list(x), labels)
        right.set_xlabel("vocabulary size")
        right.set_ylabel("training time, s (median)")
        right.set_title(bench["cpu"], fontsize=8)
        right.legend(fontsize=8)
        right.grid(axis="y", alpha=0.3)
    else:
        right.set_axis_off()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ASSETS / "tokenizer-merges.png")
    args = parser.parse_args(argv)
    bench = json.loads(BENCH_JSON.read_text()) if BENCH_JSON.is_file() else None
    curve = compression_curve(load_tinyshakespeare())
    for v, r in curve:
        print(f"vocab {v:5d}: {r:.3f} bytes/token")
    print("wrote", draw(curve, bench, args.out))


if __name__ == "__main__":
    main()
