"""Solutions of the assignments in :mod:`sitp.exercises`, tested by the book's suite."""
