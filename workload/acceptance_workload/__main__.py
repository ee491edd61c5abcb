"""Entry point of the workload container: `python -m acceptance_workload` (under torchrun or mpirun)."""

from acceptance_workload.run import main
from acceptance_workload.runtime.control import hard_exit

# Leave with os._exit (after flushing), not sys.exit: the heartbeat, the watchdog and the store thread are
# daemon threads that call into torch's C++ store with the GIL released. One still inside such a call when the
# interpreter shuts down is ended by pthread_exit from pybind11's gil_scoped_release destructor, which aborts
# the whole process ("terminate called without an active exception", exit -6: pytorch/pytorch#38228) after
# the report was written. The run has nothing left to clean up by then: the process group is destroyed and
# the report is delivered.
hard_exit(main())
