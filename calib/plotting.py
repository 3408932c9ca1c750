"""What every calib figure gets before it is saved or shown: titles that fit, log axes whose tick
labels do not overlap, and a "SIMULATED" mark on figures from the simulated device.

The calibrations draw their figures (``figures()`` of each module, ``calib.fit``'s line and
residual plots); :func:`finish` is applied once to each, in ``Calibration.save_figure`` and in the
fit helpers, so that no calibration has to remember it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from .errors import CalibError

SIMULATED_MARK = "SIMULATED DEVICE"


class FigureError(CalibError, OSError):
    """A figure's file could not be written; the message names the file and the reason."""


def _wrap(text: str, width_in: float, fontsize: float) -> str:
    # an average glyph is about half an em wide: the characters that fit the figure's width
    chars = max(20, int(width_in * 72 / (0.5 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in text.splitlines()) if len(text) > chars else text


def tidy_log_axes(ax) -> None:
    """Major ticks of a log axis as plain numbers (``300``, ``3000``), minor ticks unlabelled: the
    default labels minor ticks too (``3×10²``), and they run into each other."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    for axis, scale, limits in ((ax.xaxis, ax.get_xscale(), ax.get_xlim()), (ax.yaxis, ax.get_yscale(), ax.get_ylim())):
        if scale not in ("log", "symlog"):
            continue
        axis.set_major_formatter(plain)
        lo, hi = sorted(limits)
        if scale == "log" and lo > 0 and math.log10(hi / lo) < 2:  # under two decades: label 2 and 5 as well
            axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
            axis.set_minor_formatter(plain)
        else:
            axis.set_minor_formatter(NullFormatter())


def finish(fig, *, simulated: bool = False):
    """Wrap titles to the figure's width, tidy log axes, and mark a simulated device's figure."""
    width_in = fig.get_figwidth()
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None and suptitle.get_text():
        suptitle.set_text(_wrap(suptitle.get_text(), width_in, suptitle.get_fontsize()))
    axes = fig.get_axes()
    for ax in axes:
        share = width_in * ax.get_position().width  # this panel's width in inches
        title = ax.title
        if title.get_text():
            title.set_text(_wrap(title.get_text(), share, title.get_fontsize()))
        tidy_log_axes(ax)
    if simulated and not getattr(fig, "_calib_simulated_mark", False):
        # the top-left corner: axis labels take the bottom, titles the top centre
        fig.text(0.003, 0.997, SIMULATED_MARK, ha="left", va="top", fontsize=8, color="#b00020",
                 fontweight="bold", alpha=0.85)
        fig._calib_simulated_mark = True
    return fig


def detach(fig):
    """Close a figure this code created (it stays drawable and savable) so that pyplot's inline
    backend does not show it a second time beside the figure a helper returns."""
    import matplotlib.pyplot as plt

    plt.close(fig)
    return fig


def save(fig, path, *, error: type = FigureError, **options) -> bytes:
    """``fig`` rendered (in the format of ``path``'s suffix, PNG without one) and written whole to
    ``path`` (``calib.atomic.replace``): a write that fails (a full disk) leaves the old file or
    none, never a truncated image, and raises ``error`` naming the file and the reason. Returns the
    rendered bytes, so that the caller can show the figure without reading the file back."""
    import io

    from . import atomic

    buf = io.BytesIO()
    fig.savefig(buf, format=Path(path).suffix[1:].lower() or "png", **options)
    data = buf.getvalue()
    atomic.replace(path, data, error, streams=False)
    return data
