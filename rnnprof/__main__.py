import sys

from rnnprof.cli import main

sys.exit(main())
