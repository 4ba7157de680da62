"""How a process of a multi-process run (trainer, fine-tuning, evaluation, builder) ends once its work is written.

torch's gloo ``ProcessGroup`` destructor joins its worker threads while holding the GIL, and a worker that is still
releasing the last finished collective needs the GIL: tearing the group down can then hang forever (seen on a loaded
machine: rank 1 of a finished 2-process fine-tuning run never exited, and a launcher waiting for it waits too). So a
process that took part in a group leaves with ``os._exit`` after flushing, and the group's destructors never run.
"""

from __future__ import annotations

import logging
import os
import sys


def exit_code_after_run(num_processes: int, code: int) -> int:
    """``code``, for a single-process run; a process of a multi-process run is ended here, with ``code``.

    Call it last: everything must be written and closed (trackers finished, files closed) before.
    """
    if num_processes == 1:
        return code
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
