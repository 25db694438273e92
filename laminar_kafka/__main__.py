"""``python -m laminar_kafka``: the ``laminar-kafka`` command."""
import sys

from laminar_kafka.cli.main import main

sys.exit(main())
