"""Front door: `python -m opennki ...` is the `opennki` command (see opennki.cli)."""

import sys

from opennki.cli import main

sys.exit(main())
