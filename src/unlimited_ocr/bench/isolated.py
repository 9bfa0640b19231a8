"""Run one benchmark cell in a fresh process, so its peak RSS (VmHWM, see peak_rss_mb) is its own and nothing
leaks between cells. The target is called as ``target(*args, queue)`` and must ``queue.put`` exactly one result."""

from __future__ import annotations

import multiprocessing
from queue import Empty


def run_isolated(target, *args):
    """Start the cell, wait for its one result; raise if the process dies without giving one."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(*args, queue))
    process.start()
    try:
        while True:
            try:
                return queue.get(timeout=1.0)
            except Empty:
                if not process.is_alive() and queue.empty():
                    raise RuntimeError(f"benchmark process {target.__name__} exited with code {process.exitcode} "
                                       "without a result (see its traceback above)") from None
    finally:
        process.join()


def _status_mb(field: str) -> float | None:
    """A memory field of /proc/self/status (``VmRSS``, ``VmHWM``) in MB; None where /proc is not available."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def current_rss_mb() -> float:
    """This process's resident size now (``VmRSS``), in MB; 0 where /proc is not available."""
    return _status_mb("VmRSS") or 0.0


def peak_rss_mb() -> float:
    """This process's own peak RSS in MB (``VmHWM``). Not ``ru_maxrss``: a child started by fork + exec inherits
    its parent's resident size at the fork in that figure (a bench parent that built a 12 GB model once made every
    cell report 11,848 MB), while ``VmHWM`` belongs to the memory map the exec created."""
    peak = _status_mb("VmHWM")
    if peak is not None:
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
