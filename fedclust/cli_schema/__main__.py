"""`python -m fedclust.cli_schema --write | --check`: refresh or check fedclust/cli_schema.json."""

import sys

from fedclust.cli_schema.writer import main

sys.exit(main())
