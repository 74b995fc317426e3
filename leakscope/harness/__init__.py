"""The harness: resolve a target and run its step as a real caller would.

``target`` resolves ``pkg.mod:Name``; ``protocol`` turns it into an EngineSpec; ``trial`` runs one
step and keeps only what a caller keeps; ``guard``, ``rng`` and ``runtime`` keep the process
state a check runs under; ``distributed`` runs ranks in lockstep; ``source`` locates user lines."""
