"""The assignments' tests; see :mod:`sitp.exercises` for how to run them."""
