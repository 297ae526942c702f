import sys

from kitchen.apps.cli import main

sys.exit(main())
