"""The assignments' tests (chapters 1, 2.1, 3.2 and 4.1); see :mod:`sitp.exercises` for how
to run them."""
