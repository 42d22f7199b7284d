"""PNG plots for the jobs' reports, drawn off-screen with matplotlib (imported only when a plot is made)."""

from __future__ import annotations

import io
from typing import Any


def new_plot(width_in: float = 7.0, height_in: float = 4.2) -> tuple[Any, Any]:
    """A figure and its axes, on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width_in, height_in), dpi=110)


def png(figure: Any, axes: Any, x_label: str, y_label: str, title: str | None = None) -> bytes:
    """The figure as PNG bytes, labelled, with a grid and a legend; the figure is closed."""
    import matplotlib.pyplot as plt

    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    if title:
        axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
