"""`python -m fedclust.cli_schema --write | --check`: refresh or check fedclust/cli_schema.json."""

import sys

from fedclust.cli_schema.writer import main

if __name__ == "__main__":  # importing this module (a package walk) writes nothing
    sys.exit(main())
