"""``python -m sitp``: the command line (``sitp/train/cli.py``)."""

from sitp.train.cli import main

raise SystemExit(main())
