"""`python -m fastloader.pack.cli`: packdata."""

import sys

from fastloader.pack.cli.main import main

sys.exit(main())
