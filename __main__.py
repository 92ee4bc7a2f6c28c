"""``python -m leveret`` is the same as the ``leveret`` command."""

import sys

from leveret.cli import main

sys.exit(main())
