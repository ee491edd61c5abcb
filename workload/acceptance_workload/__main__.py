"""Entry point of the workload container: `python -m acceptance_workload` (under torchrun or mpirun)."""

import sys

from acceptance_workload.run import main

sys.exit(main())
