"""Innovation rate against temperature for a checkpoint of ``python -m sitp train``.

    python docs/assets/projects/names-innovation.py runs/gpt [--num 1000] [--seed 0]

For each temperature it draws ``--num`` names (seeded) and counts, as shares of the
draws: names not in the training split (the innovation rate that ``sitp sample``
prints), names that are not in the training split but are in the held-out validation
or test split (new to the model, yet real names), and distinct names. Prints a
Markdown table and writes it as JSON next to this script (names-innovation-<model>.json).
"""
import argparse
import json
from pathlib import Path

import sitp
from sitp.train.checkpoint import load_checkpoint
from sitp.data import load_names, split_words
from sitp.models import MODELS
from sitp.models.sampling import sample_names

TEMPERATURES = (0.5, 0.8, 1.0, 1.2, 1.5, 2.0)


def innovation_table(model, itos, train, held_out, num, seed, fixed_context=False):
    rows = []
    for tau in TEMPERATURES:
        g = sitp.Generator().manual_seed(seed)
        names = sample_names(model, itos, num, temperature=tau, generator=g,
                             fixed_context=fixed_context)
        new = [n for n in names if n not in train]
        rows.append({"temperature": tau,
                     "innovation": len(new) / num,
                     "new_but_real": sum(n in held_out for n in new) / num,
                     "distinct": len(set(names)) / num,
                     "examples": names[:8]})
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--num", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    point = load_checkpoint(args.dir)
    record = point.record
    spec = MODELS[record["model"]]
    model = spec.build(record["model_config"])
    point.load_model(model)
    model.eval()
    train, val, test = split_words(load_names(record["train_config"]["data"]),
                                   seed=record.get("split_seed", 42))
    rows = innovation_table(model, record["vocab"], set(train), set(val) | set(test),
                            args.num, args.seed, fixed_context=spec.data == "context")
    print("| temperature | new (innovation rate) | new and in the held-out names | distinct |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['temperature']} | {r['innovation']:.1%} | {r['new_but_real']:.1%} "
              f"| {r['distinct']:.1%} |")
    out = Path(__file__).with_name(f"names-innovation-{record['model']}.json")
    out.write_text(json.dumps({"dir": args.dir, "step": record["step"], "num": args.num,
                               "seed": args.seed, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
