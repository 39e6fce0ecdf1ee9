"""``python -m nnts``: the ``nnts`` command of this installation, whether or not it is on PATH."""
import sys

from nnts.cli import main

sys.exit(main())
