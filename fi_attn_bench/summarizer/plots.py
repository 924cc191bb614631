"""PNG renderers for the summary and regression reports (matplotlib, optional).

The summarizer builds one result model and hands these functions its tables; they
only lay out what they are given: which rows to draw (status ok), how to facet and
colour them, where the roof and gate lines go. Nothing is measured or aggregated here.

matplotlib is imported inside the functions, and figures are drawn on their own Agg
canvas (``matplotlib.figure.Figure``), so rendering needs no display, never changes
the process-wide pyplot backend and leaves no open pyplot figures. The PNGs carry no
software-version metadata: the same table gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from fi_attn_bench.results.schema import STATUS_LEGACY_OK, STATUS_OK, case_columns
from fi_attn_bench.summarizer.identity import short_labels
from fi_attn_bench.summarizer.model import plural

PLOTTED_STATUSES = (STATUS_OK, STATUS_LEGACY_OK)
SEQ_LEN_COLUMNS = ("seq_len_kv", "seq_len", "seq_len_q")  # first present one is the x axis
BATCH_COLUMN = "batch_size"
# Columns of the summarizer's model that are neither case parameters nor registered.
MODEL_COLUMNS = frozenset({"case_label", "arithmetic_intensity", "state", "speedup"})
MAX_PANELS = 6
PANEL_COLUMNS = 3
MAX_CASE_TICKS = 40  # more cases than this are drawn by rank, without labels
MAX_ROW_LABEL_CHARS = 72  # a case's varying fields, cut past this with "…"
ROW_INCHES = 0.22  # one labelled case row
ROW_BASE_INCHES = 2.0  # title, legend, axis and footnote around the rows
ROW_FIGURE_WIDTH = 10.0  # inches
RANK_FIGURE_HEIGHT = 6.0  # inches, for unlabelled ranks
FOOTNOTE_CHARS_PER_INCH = 11  # "small" type (10 pt) at DPI
LEGEND_COLUMNS = 4
FIGURE_LEGEND_COLUMNS = 6
GATE_COLOR = "#d62728"
MAX_BARS = 80  # more cases than this are drawn as dots
LOG_SPEEDUP_RATIO = 4.0  # a speedup axis spanning more than this ratio is logarithmic
DPI = 100
MIN_FIGURE_WIDTH = 7.0  # inches
ROOFLINE_SIZE = (7.5, 5.5)  # inches
PNG_METADATA: Mapping[str, None] = {"Software": None}
ARTEFACT_PCT = 100.0  # pct_peak_bw above this is marked as a measurement artefact
SCALING_PNG, ROOFLINE_PNG, SPEEDUP_PNG = "_scaling.png", "_roofline.png", "_speedup.png"
ENERGY_PNG, FOREST_PNG = "_energy.png", "_forest.png"  # the forest: summarizer.forest_plot
# every file written ends with one
PLOT_FILE_SUFFIXES = (SCALING_PNG, ROOFLINE_PNG, SPEEDUP_PNG, ENERGY_PNG, FOREST_PNG)

STATE_COLORS: Mapping[str, str] = {
    "regression": "#d62728",
    "compared": "#4c72b0",
    "improvement": "#2ca02c",
}
OTHER_STATE_COLORS = ("#ff7f0e", "#9467bd", "#8c564b", "#7f7f7f", "#17becf", "#bcbd22")


# --------------------------------------------------------------------------- helpers


def safe_file_stem(api: str) -> str:
    """A deterministic file-name stem for an API name (unsafe names get a short hash)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", str(api)).strip("._") or "api"
    if stem != api:
        stem = f"{stem}_{hashlib.sha1(str(api).encode()).hexdigest()[:8]}"
    return stem


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Path) -> Path:
    figure.savefig(path, dpi=DPI, metadata=dict(PNG_METADATA))
    return path


def _numeric(frame, column: str):
    import pandas as pd

    if column not in frame.columns:
        return pd.Series(float("nan"), index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce")


def literal(text) -> str:
    """Text from a CSV drawn as it is: a "$" would start matplotlib's math mode (and an
    unbalanced formula fails the draw)."""
    return str(text).replace("$", r"\$")


def _wrap(title: str, width_inches: float) -> str:
    """Wrap a title to the figure's width (about 8 characters per inch at 12 pt)."""
    return literal("\n".join(textwrap.wrap(title, max(30, int(width_inches * 8)))))


def _format_value(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _empty(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


def _format_tokens(value: float, _position=None) -> str:
    if value >= 1024 and value % 1024 == 0:
        return f"{int(value) // 1024}k"
    return f"{value:g}"


def _plotted_rows(rows):
    status = rows["status"] if "status" in rows.columns else None
    if status is None:
        return rows.iloc[0:0]
    return rows[status.isin(PLOTTED_STATUSES)]


def _batch_colors(values: Sequence) -> dict:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    count = len(values)
    return {v: cmap(0.85 * i / (count - 1) if count > 1 else 0.0) for i, v in enumerate(values)}


def _sorted_unique(series) -> list:
    """Distinct values, numbers by value (batch_size 8 before 64)."""
    from fi_attn_bench.summarizer.identity import natural_key

    return sorted(series.dropna().unique().tolist(), key=lambda value: natural_key(str(value)))


# --------------------------------------------------------------------------- summary


def _seq_column(frame) -> str | None:
    for column in SEQ_LEN_COLUMNS:
        if column in frame.columns and _numeric(frame, column).gt(0).any():
            return column
    return None


def _facet_columns(frame, fixed: Sequence[str]) -> list[str]:
    """Case parameters that vary within this API, other than the x axis and the lines."""
    names = [c for c in case_columns(frame.columns) if c not in MODEL_COLUMNS and c not in fixed]
    return [c for c in names if frame[c].nunique(dropna=False) > 1]


def _panels(frame, facets: Sequence[str]) -> tuple[list[tuple[str, object]], int]:
    """(title, rows) per facet combination, at most MAX_PANELS (the largest), and how
    many combinations were left out."""
    if not facets:
        return [("", frame)], 0
    groups = list(frame.groupby(list(facets), dropna=False, sort=True))
    ranked = sorted(range(len(groups)), key=lambda i: (-len(groups[i][1]), i))
    kept = sorted(ranked[:MAX_PANELS])
    panels = []
    for index in kept:
        key, rows = groups[index]
        key = key if isinstance(key, tuple) else (key,)
        terms = zip(facets, key, strict=True)
        # an empty cell (a uniform batch's workload) names no parameter, as in case labels
        label = ", ".join(f"{c}={_format_value(v)}" for c, v in terms if not _empty(v)) or "n/a"
        panels.append((literal("\n".join(textwrap.wrap(label, 44))), rows))
    return panels, len(groups) - len(kept)


def _draw_lines(ax, rows, seq_col: str, value_col: str, colors: Mapping) -> None:
    series_keys = list(colors) if colors else [None]
    for key in series_keys:
        part = rows if key is None else rows[rows[BATCH_COLUMN] == key]
        x, y = _numeric(part, seq_col), _numeric(part, value_col)
        keep = (x > 0) & (y > 0)
        if not keep.any():
            continue
        order = x[keep].sort_values(kind="mergesort").index
        color = colors.get(key, "C0") if colors else "C0"
        label = f"{BATCH_COLUMN}={_format_value(key)}" if key is not None else value_col
        label = literal(label)
        ax.plot(x[order], y[order], marker="o", markersize=3.5, lw=1.2, color=color, label=label)


def _mark_artefacts(ax, rows, seq_col: str) -> bool:
    above = _numeric(rows, "pct_peak_bw") > ARTEFACT_PCT
    if not above.any():
        return False
    ax.scatter(
        _numeric(rows, seq_col)[above],
        _numeric(rows, "bandwidth_GB_s")[above],
        marker="x",
        s=60,
        color="#d62728",
        zorder=4,
        label=f"> {ARTEFACT_PCT:g}% of peak: artefact (e.g. L2 hits)",
    )
    return True


def _plain_log_ticks(axis, limits: tuple[float, float]) -> None:
    """Plain numbers (4000, 0.02) on a log axis; 2 and 5 ticks labelled when it is short."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    axis.set_major_formatter(plain)
    low, high = limits
    if low > 0 and high / low <= 100:
        axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
        axis.set_minor_formatter(plain)
    else:
        axis.set_minor_formatter(NullFormatter())


def _style_seq_axis(ax, seq_col: str, ylabel: str, show_xlabel: bool) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_format_tokens))
    _plain_log_ticks(ax.yaxis, ax.get_ylim())
    ax.set_ylabel(ylabel)
    if show_xlabel:
        ax.set_xlabel(f"{seq_col} (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def _figure_legend(figure, sources: Sequence) -> None:
    """One legend for the figure, every distinct label drawn on ``sources``, below the
    panels (outside them: never over a line)."""
    handles = {}
    for ax in sources:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        labels = sorted(handles, key=_legend_key)
        figure.legend(
            [handles[label] for label in labels],
            labels,
            fontsize="small",
            loc="outside lower center",
            ncol=min(len(handles), FIGURE_LEGEND_COLUMNS),
            frameon=False,
        )


def _legend_key(label: str) -> tuple:
    """Batch sizes by value first (the order of their colours), then the rest as drawn."""
    from fi_attn_bench.summarizer.identity import natural_key

    name, _, value = label.partition("=")
    return (0, natural_key(value)) if name == BATCH_COLUMN else (1,)


def _constant_fields(frame, fixed: Sequence[str]) -> str:
    """ "name=value, ..." of the case parameters every row shares (the panels leave them out)."""
    names = [c for c in case_columns(frame.columns) if c not in MODEL_COLUMNS and c not in fixed]
    shared = []
    for name in names:
        values = frame[name].dropna().unique().tolist()
        if len(values) == 1 and frame[name].notna().all() and not _empty(values[0]):
            shared.append(f"{name}={_format_value(values[0])}")
    return ", ".join(shared)


def _peak_value(peaks: Mapping | None, key: str) -> float | None:
    if not peaks:
        return None
    try:
        value = float(peaks.get(key))
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def _peaks_label(peaks: Mapping | None) -> str:
    source = (peaks or {}).get("source")
    return f" (peaks: {source})" if source else ""


def _render_scaling(api: str, rows, peaks: Mapping | None, out_dir: Path) -> Path | None:
    seq_col = _seq_column(rows)
    if seq_col is None:
        return None
    has_batch = BATCH_COLUMN in rows.columns and rows[BATCH_COLUMN].notna().any()
    colors = _batch_colors(_sorted_unique(rows[BATCH_COLUMN])) if has_batch else {}
    fixed = (seq_col, BATCH_COLUMN) if has_batch else (seq_col,)
    panels, omitted = _panels(rows, _facet_columns(rows, fixed))
    ncols = min(PANEL_COLUMNS, len(panels))
    prow = math.ceil(len(panels) / ncols)
    width = max(4.6 * ncols + 0.8, MIN_FIGURE_WIDTH)
    figure = _figure(width, 3.4 * 2 * prow + 0.8)
    axes = figure.subplots(2 * prow, ncols, squeeze=False)
    peak_bw = _peak_value(peaks, "bandwidth_GB_s")
    for index, (title, part) in enumerate(panels):
        r, c = divmod(index, ncols)
        time_ax, bw_ax = axes[r][c], axes[prow + r][c]
        _draw_lines(time_ax, part, seq_col, "time_ms", colors)
        _draw_lines(bw_ax, part, seq_col, "bandwidth_GB_s", colors)
        if peak_bw is not None:
            bw_ax.axhline(peak_bw, ls="--", lw=1, color="black", label=f"peak {peak_bw:,.0f} GB/s")
        _mark_artefacts(bw_ax, part, seq_col)
        _style_seq_axis(time_ax, seq_col, "time (ms)", False)
        _style_seq_axis(bw_ax, seq_col, "bandwidth (GB/s)", r == prow - 1)
        time_ax.set_title(title, fontsize="small")
        bw_ax.set_title(title, fontsize="small")
    for index in range(len(panels), prow * ncols):
        r, c = divmod(index, ncols)
        axes[r][c].set_visible(False)
        axes[prow + r][c].set_visible(False)
    _figure_legend(figure, [ax for row in axes for ax in row])
    more = f"; {plural(omitted, 'more configuration')} not shown" if omitted else ""
    title = f"{api}: time and bandwidth vs {seq_col}{more}{_peaks_label(peaks)}"
    figure.suptitle(_wrap(title, width))
    common = _constant_fields(rows, fixed)
    if common:
        figure.supxlabel(wrap_footnote(f"every case: {common}", width), fontsize="small")
    return _save(figure, out_dir / (safe_file_stem(api) + SCALING_PNG))


def _draw_roofs(ax, peaks: Mapping | None, ai_min: float, ai_max: float) -> None:
    import numpy as np

    bw, tf = _peak_value(peaks, "bandwidth_GB_s"), _peak_value(peaks, "tflops")
    if bw is None and tf is None:
        return
    ridge = tf * 1e3 / bw if bw is not None and tf is not None else None
    low = ai_min / 4
    high = max(ai_max, ridge or ai_max) * 4
    x = np.geomspace(low, high, 256)
    if bw is not None:
        memory = bw * x / 1e3  # GB/s * FLOP/byte = GFLOP/s -> TFLOP/s
        roof = np.minimum(memory, tf) if tf is not None else memory
        ax.plot(x, roof, color="black", lw=1.5, label=f"memory roof {bw:,.0f} GB/s")
    if tf is not None:
        ax.axhline(tf, color="black", ls="--", lw=1, label=f"compute roof {tf:,.0f} TFLOP/s")
    if ridge is not None:
        ax.axvline(ridge, color="gray", ls=":", lw=1, label=f"ridge {ridge:,.0f} FLOP/byte")
    ax.set_xlim(low, high)


def _render_roofline(api: str, rows, peaks: Mapping | None, out_dir: Path) -> Path | None:
    ai, tflops = _numeric(rows, "arithmetic_intensity"), _numeric(rows, "tflops")
    keep = (ai > 0) & (tflops > 0) & ai.notna()
    if not keep.any():
        return None
    figure = _figure(*ROOFLINE_SIZE)
    ax = figure.subplots()
    points = rows[keep]
    has_batch = BATCH_COLUMN in points.columns and points[BATCH_COLUMN].notna().any()
    if has_batch:
        colors = _batch_colors(_sorted_unique(points[BATCH_COLUMN]))
        for key, color in colors.items():
            part = points[BATCH_COLUMN] == key
            ax.scatter(
                ai[keep][part],
                tflops[keep][part],
                s=18,
                color=color,
                label=literal(f"{BATCH_COLUMN}={_format_value(key)}"),
            )
    else:
        ax.scatter(ai[keep], tflops[keep], s=18, color="C0", label="cases")
    _draw_roofs(ax, peaks, float(ai[keep].min()), float(ai[keep].max()))
    _log_log_axes(ax, "arithmetic intensity (FLOP/byte)", "achieved TFLOP/s")
    no_peaks = "" if peaks else " (no device peaks known: roofs not drawn)"
    title = f"{api}: roofline, {plural(int(keep.sum()), 'case')}{no_peaks}{_peaks_label(peaks)}"
    ax.set_title(_wrap(title, ROOFLINE_SIZE[0]))
    return _save(figure, out_dir / (safe_file_stem(api) + ROOFLINE_PNG))


def _log_log_axes(ax, xlabel: str, ylabel: str) -> None:
    """Log scales with plain tick labels, axis labels, a major grid and the legend."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_ticks(ax.xaxis, ax.get_xlim())
    _plain_log_ticks(ax.yaxis, ax.get_ylim())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="x-small", loc="best")


def _render_energy(api: str, rows, peaks: Mapping | None, out_dir: Path) -> Path | None:
    """Energy per call against time per call, one colour per implementation (``impl``)."""
    time_ms, energy = _numeric(rows, "time_ms"), _numeric(rows, "energy_mJ")
    keep = (time_ms > 0) & (energy > 0)
    if not keep.any():
        return None
    figure = _figure(*ROOFLINE_SIZE)
    ax = figure.subplots()
    points = rows[keep]
    impls = _sorted_unique(points["impl"]) if "impl" in points.columns else []
    groups = [(literal(f"impl={_format_value(i)}"), points["impl"] == i) for i in impls] or [
        ("cases", slice(None))
    ]
    for index, (label, part) in enumerate(groups):
        ax.scatter(time_ms[keep][part], energy[keep][part], s=18, color=f"C{index}", label=label)
    _log_log_axes(ax, "time per call (ms)", "energy per call (mJ)")
    title = f"{api}: energy vs time, {plural(int(keep.sum()), 'case')}"
    ax.set_title(_wrap(title, ROOFLINE_SIZE[0]))
    return _save(figure, out_dir / (safe_file_stem(api) + ENERGY_PNG))


def render_summary_plots(rows, out_dir: Path) -> list[Path]:
    """Per API: ``{api}_scaling.png`` (time and bandwidth vs sequence length, one line
    per batch size, one panel per other case configuration), ``{api}_roofline.png`` and,
    where rows have ``energy_mJ``, ``{api}_energy.png`` (energy vs time per call).

    ``rows.attrs["peaks"]`` may hold ``{"bandwidth_GB_s", "tflops"[, "source"]}``.
    Only rows with status ok / legacy_inferred_ok are drawn; a plot without any
    drawable point is not written. Returns the written paths in API order.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    peaks = rows.attrs.get("peaks") if hasattr(rows, "attrs") else None
    drawn = _plotted_rows(rows)
    paths = []
    for api in _sorted_unique(drawn["api"]) if "api" in drawn.columns else []:
        api_rows = drawn[drawn["api"] == api]
        for render in (_render_scaling, _render_roofline, _render_energy):
            path = render(str(api), api_rows, peaks, out_dir)
            if path is not None:
                paths.append(path)
    return paths


# --------------------------------------------------------------------------- regression


def _state_colors(states: Sequence[str]) -> dict[str, str]:
    others = iter(OTHER_STATE_COLORS * (len(states) // len(OTHER_STATE_COLORS) + 1))
    return {s: STATE_COLORS.get(s) or next(others) for s in sorted(states)}


def gate_speedup(gate_pct: float) -> float:
    """The speedup below which a case is slower than the gate allows."""
    return 1.0 / (1.0 + gate_pct / 100.0)


def _draw_speedups(ax, ranked, positions, colors: Mapping[str, str]) -> None:
    """A bar from 1 to each case's speedup (a dot past MAX_BARS cases), coloured by state."""
    speedup = ranked["_speedup"].to_numpy(dtype=float)
    states = ranked["state"].fillna("").astype(str) if "state" in ranked else None
    point_colors = [colors.get(s, "#4c72b0") for s in states] if states is not None else "#4c72b0"
    if len(ranked) <= MAX_BARS:
        ax.barh(positions, speedup - 1.0, left=1.0, height=0.75, color=point_colors)
    else:
        ax.scatter(speedup, positions, s=10, color=point_colors)


def _speedup_legend(ax, colors: Mapping[str, str], gate_pct: float | None) -> None:
    """States and the gate line in rows above the axes: never over a bar."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=color, label=state or "(no state)") for state, color in colors.items()]
    if gate_pct is not None:
        label = f"gate: {gate_pct:g}% slower = ×{gate_speedup(gate_pct):.3f}"
        handles.append(Line2D([], [], color=GATE_COLOR, ls="--", lw=1.2, label=label))
    ax.legend(
        handles=handles,
        fontsize="x-small",
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        ncol=min(len(handles), LEGEND_COLUMNS),
        frameon=False,
        borderaxespad=0.2,
    )


def _style_speedup_axis(ax, low: float, high: float) -> None:
    """Linear speedup axis for a narrow range, log (ticks at 1-2-5) for a wide one."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if high / low > LOG_SPEEDUP_RATIO:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(low / 1.1, high * 1.1)
    else:
        margin = 0.06 * (high - low)
        ax.set_xlim(low - margin, high + margin)


def _render_speedup(api: str, rows, gate_pct: float | None, out_dir: Path) -> Path | None:
    figure = speedup_figure(api, rows, gate_pct)
    if figure is None:
        return None
    return _save(figure, out_dir / (safe_file_stem(api) + SPEEDUP_PNG))


def speedup_figure(api: str, rows, gate_pct: float | None):
    """The speedup figure of one API, or None when no case has a speedup: one row per case,
    the slowest at the top, labelled by the fields that vary (the shared ones in the footnote);
    past MAX_CASE_TICKS cases, rows by rank without labels."""
    speedup = _numeric(rows, "speedup")
    keep = speedup.notna() & (speedup > 0) & speedup.map(math.isfinite)
    if not keep.any():
        return None
    ranked = rows[keep].assign(_speedup=speedup[keep])
    sort_by = ["_speedup", "case_label"] if "case_label" in ranked else ["_speedup"]
    ranked = ranked.sort_values(sort_by, kind="mergesort")
    count = len(ranked)
    labelled = count <= MAX_CASE_TICKS and "case_label" in ranked
    ticks, common = (
        short_labels(ranked["case_label"].astype(str).tolist(), MAX_ROW_LABEL_CHARS)
        if labelled
        else ([], "")
    )
    height = ROW_BASE_INCHES + ROW_INCHES * max(count, 5) if labelled else RANK_FIGURE_HEIGHT
    figure = _figure(ROW_FIGURE_WIDTH, height)
    ax = figure.subplots()
    positions = list(range(count, 0, -1))  # the slowest case at the top
    states = ranked["state"].fillna("").astype(str).unique().tolist() if "state" in ranked else []
    colors = _state_colors(states)
    _draw_speedups(ax, ranked, positions, colors)
    ax.axvline(1.0, color="black", lw=1)
    low, high = float(ranked["_speedup"].min()), float(ranked["_speedup"].max())
    if gate_pct is not None:
        ax.axvline(gate_speedup(gate_pct), color=GATE_COLOR, ls="--", lw=1.2)
        low = min(low, gate_speedup(gate_pct))
    _style_speedup_axis(ax, min(low, 1.0), max(high, 1.0))
    _speedup_legend(ax, colors, gate_pct)
    ax.set_ylim(0.4, count + 0.6)
    if labelled:
        ax.set_yticks(positions, [literal(tick) for tick in ticks], fontsize="small")
    else:
        ax.set_yticks([])
        ax.set_ylabel("case rank (slowest at the top)")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    skipped = len(rows) - count
    note = f"; {skipped} not ok in both runs, not shown" if skipped else ""
    footnote = "speedup = baseline time / candidate time; right of 1: faster"
    footnote += f"; every case: {common}" if common else ""
    figure.supxlabel(wrap_footnote(footnote, ROW_FIGURE_WIDTH), fontsize="small")
    figure.suptitle(_wrap(f"{api}: speedup per case, {plural(count, 'case')}{note}", 10.0))
    return figure


def wrap_footnote(text: str, width_inches: float) -> str:
    """A footnote in "small" type wrapped to the figure's width."""
    return literal("\n".join(textwrap.wrap(text, int(width_inches * FOOTNOTE_CHARS_PER_INCH))))


def render_regression_plots(matched, gate_pct: float | None, out_dir: Path) -> list[Path]:
    """Per API, ``{api}_speedup.png``: every comparable case's speedup, sorted, coloured
    by state, with lines at 1.0 and (when ``gate_pct`` is set) at 1/(1 + gate/100).

    Cases whose speedup is NaN (not ok in both runs) are counted in the title only.
    Returns the written paths in API order.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for api in _sorted_unique(matched["api"]) if "api" in matched.columns else []:
        path = _render_speedup(str(api), matched[matched["api"] == api], gate_pct, out_dir)
        if path is not None:
            paths.append(path)
    return paths
