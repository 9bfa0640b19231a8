"""PNG plots for the benchmarks (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def rolling_median(values: list[float], span: int) -> list[float]:
    import numpy as np

    array = np.asarray(values, dtype=float)
    if len(array) < span:
        return list(array)
    windows = np.lib.stride_tricks.sliding_window_view(array, span)
    return list(np.median(windows, axis=-1))


def plot_decode(step_times: dict[str, list[float]], path: str | Path, title: str, span: int = 128) -> Path:
    """Two panels: per-step latency (rolling median) and tokens/s against output position, one line per engine."""
    plt = _pyplot()
    figure, (latency_axis, rate_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for engine, stamps in step_times.items():
        deltas = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:])]
        smooth = rolling_median(deltas, span)
        positions = list(range(span, span + len(smooth))) if len(deltas) >= span else list(range(1, len(smooth) + 1))
        latency_axis.plot(positions, smooth, label=engine)
        rate_axis.plot(positions, [1000 / value if value > 0 else float("nan") for value in smooth], label=engine)
    latency_axis.set(xlabel="output position (tokens)", ylabel=f"decode step latency, ms (median of {span})")
    rate_axis.set(xlabel="output position (tokens)", ylabel="tokens/s")
    for axis in (latency_axis, rate_axis):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
