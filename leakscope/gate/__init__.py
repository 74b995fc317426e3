"""The pre-merge gate: ``[tool.leakscope]`` configuration (``config``) and the pytest plugin
(``pytest_plugin``). Torch-free: both load in every pytest session and CLI start."""
