"""Judge and diagnose: turn what a step left alive into findings.

``verdict`` judges one mode of one target (candidates, bytes, confirmation); ``growth`` runs
several micro-batches; ``projection`` scales a fit to real sizes; ``explain`` describes one
retained graph; ``fixes`` words the fix for a holder."""
