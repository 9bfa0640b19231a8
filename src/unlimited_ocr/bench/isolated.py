"""Run one benchmark cell in a fresh process, so its peak RSS (ru_maxrss) is its own and nothing leaks between
cells. The target is called as ``target(*args, queue)`` and must ``queue.put`` exactly one result."""

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
