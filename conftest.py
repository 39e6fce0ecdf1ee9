"""The nnts pytest plugin is ``nnts/plugin.py``, registered through the ``pytest11`` entry point of
the installed package (``pip install -e .`` in a clone). This loads it where entry points are not
loaded (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``)."""
import sys

pytest_plugins = [] if "nnts.plugin" in sys.modules else ["nnts.plugin"]
