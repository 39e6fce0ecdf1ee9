"""The example drivers, installed as ``nnts.examples``: ``nnts init`` makes a driver package of
``python_driver/toy_driver.py``."""
