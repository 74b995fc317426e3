"""Runners: where a check runs.

- :mod:`~leakscope.runner.inprocess`: every mode of a target in this process, guarded;
- :mod:`~leakscope.runner.isolation`: a child process per target (``-j N`` at once);
- :mod:`~leakscope.runner.zygote`: the fork server that imports torch once, and both ends of its protocol;
- :mod:`~leakscope.runner.worker`: what each child runs.
"""
