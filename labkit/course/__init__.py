"""Everything that runs the course, and nothing a kernel needs:

    kernel_checks   the checks of the students' kernel exercises (odd shapes, a poisoned output, the
                    float64 reference; words a student can act on)
    host_program    the check of notebook 02b's whole program (the host side of the naive convolution):
                    built and run on the CPU executor, y judged outside it; program_runner runs it in
                    the grader's sandbox
    student_copy    the student version of the series: solutions cut out (``make student``)
    grade           the grader (``python -m labkit.grade``) and, in ``grading/``, its parts: the
                    Python exercises, limits, submissions and archives, the gradebook, Slurm
    series          the whole series run headless (``make series``), and which notebooks it holds
                    (00-13, and appendices such as 02b)

It sits above every other part of labkit and nothing of labkit imports it.
"""
