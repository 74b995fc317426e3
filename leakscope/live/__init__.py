"""A real job instead of a tiny model: what ``leakscope watch`` needs that ``check`` does not.

- :mod:`~leakscope.live.methods`: which step methods to watch (``pkg.mod:Class.method``);
- :mod:`~leakscope.live.patcher`: patch them, now or on import, and put them back;
- :mod:`~leakscope.live.observer`: count the calls, and look before each at what the job keeps;
- :mod:`~leakscope.live.session`: one watch, the library API ``leakscope.watch(...)``;
- :mod:`~leakscope.live.launcher`: run a script or module as ``__main__``;
- :mod:`~leakscope.live.processes`: every process of the job (spawned workers, torchrun ranks,
  Ray actors), what each records as it goes, and their merged reports;
- :mod:`~leakscope.live.ranks`: the ranks of one launch, whose reports reach rank 0 through the
  launch's own store;
- :mod:`~leakscope.live.job`: what the ``watch`` command calls: the job in a process of its own.

Importing this package imports no torch.
"""
