"""``python -m sitp.bench config``: print :func:`sitp.show_config` (quote it with any figure)."""

import json

from sitp._config import show_config


def add_arguments(p):
    p.add_argument("--json", action="store_true", help="print the configuration as JSON")


def main(args):
    if args.json:
        print(json.dumps(show_config(mode="dicts"), indent=2))
    else:
        show_config()
    return 0
