"""The corpus generator's families of operations, run in order by ``generate.py``."""
