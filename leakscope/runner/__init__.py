"""Runners: check targets in this process (``inprocess``) or each in a child process
(``isolation``, whose child runs ``worker``). Above the diagnosis, below the library API."""
