"""``python -m lmfactory.cli``: the ``lmfactory`` console script."""

import sys

from lmfactory.cli import main

sys.exit(main())
