"""The models leakscope owns and hands to engines: the tiny checkpointed model (``tiny``,
its names in ``names``), the transformers + PEFT model (``hf``), and the built-in FSDP engines
(``engines``: the fixed reference engine and its leaky twin)."""
