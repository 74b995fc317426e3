"""The ``leakscope`` sub-commands, one module each: its options and the library call it makes.

- :mod:`~leakscope.commands.check`: ``check`` (and the run it shares with ``estimate``);
- :mod:`~leakscope.commands.estimate`: ``estimate``, a check projected to real scale;
- :mod:`~leakscope.commands.explain`: ``explain``, the graph one finding keeps;
- :mod:`~leakscope.commands.watch`: ``watch``, a real job;
- :mod:`~leakscope.commands.render`: ``render``, a saved JSON report in another format;
- :mod:`~leakscope.commands.common`: the options and the output helpers every command shares.

No detection logic lives here; none of these modules imports torch at load time.
:mod:`leakscope.cli` is the application that registers them.
"""
