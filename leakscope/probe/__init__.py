"""Probes: read autograd graphs (``autograd``), object references (``references``) and
weakref liveness evidence (``liveness``). Nothing here knows about engines or verdicts."""
