"""Grading a course's submissions: the notebooks' Python exercises (run against the instructor's
locked check cells), the kernel exercises' limits, student folders and archives, the gradebook, and
the Slurm array job for a course that outgrows one machine.  ``python -m labkit.grade`` drives it."""
