"""``sitp.utils``: data loading."""

from sitp.utils import data  # noqa: F401
