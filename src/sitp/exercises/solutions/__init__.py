"""Solutions of the assignments in :mod:`sitp.exercises` (chapters 1, 2.1, 3.2 and 4.1),
tested by the book's suite."""
