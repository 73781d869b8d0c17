"""``python -m sitp.bench config``: print :func:`sitp.show_config` (quote it with any figure)."""


def add_arguments(p):
    p.add_argument("--json", action="store_true", help="print the configuration as JSON")


def main(args):
    import json

    import sitp

    if args.json:
        print(json.dumps(sitp.show_config(mode="dicts"), indent=2))
    else:
        sitp.show_config()
    return 0
