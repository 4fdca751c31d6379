import sys

from lakelog.cli.main import main

sys.exit(main())
