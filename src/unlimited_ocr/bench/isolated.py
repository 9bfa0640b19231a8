"""Run one benchmark cell in a fresh process, so its peak RSS (ru_maxrss) is its own and nothing leaks between
cells. The target is called as ``target(*args, queue)`` and must ``queue.put`` exactly one result."""

from __future__ import annotations

import multiprocessing


def run_isolated(target, *args):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(*args, queue))
    process.start()
    try:
        result = queue.get()
    finally:
        process.join()
    return result
