"""The pre-merge gate: the pytest plugin (:mod:`~leakscope.gate.pytest_plugin`). Torch-free: it loads
in every pytest session. The ``[tool.leakscope]`` configuration every command reads is
:mod:`leakscope.config`."""
