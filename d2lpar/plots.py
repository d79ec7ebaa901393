"""The plots and tables of results that the lessons draw: times
(`plot_timings`), training curves (`Animator`), scaling over devices,
allreduce times, parameter drift, and what each process of a
multi-process run measured (`print_processes`, `plot_processes`).
"""
from d2lpar import cost as _cost
from d2lpar import fonts
from d2lpar.cost import allreduce_time
from d2lpar.i18n import N_, _, display_width, number, pad
from d2lpar.timeline import KIND_COLORS, KIND_LABELS
from d2lpar.timing import Benchmark


def plot_timings(descriptions, *, sum_of=(), title=None, ax=None,
                 best_of=1):
    """Bar chart of the latest time of each description (in seconds), or
    with ``best_of=n`` the shortest of its `n` latest times.

    With ``sum_of=(a, b)`` a hatched bar shows ``a + b``, the time the two
    would take one after the other, next to the measured ones. Returns
    the dict that was drawn, {label: seconds}.
    """
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    times = {d: Benchmark.best(d, best_of) for d in descriptions}
    if sum_of:
        times[' + '.join(sum_of)] = sum(Benchmark.best(d, best_of)
                                        for d in sum_of)
    if ax is None:
        ax = plt.subplots(figsize=(5.5, 0.45 * len(times) + 0.8))[1]
    labels = list(times)[::-1]
    bars = ax.barh(labels, [times[n] for n in labels], color='tab:blue')
    if sum_of:
        bars[0].set_color('lightgray')
        bars[0].set_hatch('//')
    for bar, name in zip(bars, labels):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                ' ' + number(times[name], '.3f'),
                va='center', fontsize=8)
    # How many runs each bar had to choose from (fewer if fewer were timed)
    runs = min(min(best_of, sum(name == d for name, _s in Benchmark.records))
               for d in descriptions)
    ax.set_xlabel(_('seconds, the shortest of {n} runs').format(n=runs)
                  if runs > 1 else _('seconds'))
    ax.set_xlim(0, 1.2 * max(times.values()))
    if title:
        ax.set_title(title)
    plt.tight_layout()
    plt.show()
    return times


def use_svg_display():
    """Show matplotlib figures as SVG in Jupyter, as ``d2l.use_svg_display``
    does: `Animator` displays its figure itself, and without a registered
    formatter a kernel shows only the figure's text, ``<Figure size ...>``.
    Does nothing outside IPython."""
    import sys
    ipython = sys.modules.get('IPython')
    if ipython is None or ipython.get_ipython() is None:
        return
    from matplotlib_inline import backend_inline
    backend_inline.set_matplotlib_formats('svg')


class Animator:
    """Plot data in animation, like ``d2l.Animator``, with one difference:
    d2l's version clears the whole output of the cell at every update,
    wiping out anything the cell printed before (such as which data set is
    in use); this one updates its own figure in place (an IPython display
    handle) and leaves the rest of the output alone."""

    def __init__(self, xlabel=None, ylabel=None, legend=None, *, xlim=None,
                 ylim=None, xscale='linear', yscale='linear',
                 fmts=('-', 'm--', 'g-.', 'r:'), figsize=(3.5, 2.5)):
        import matplotlib.pyplot as plt
        fonts.use_cjk_font()  # Chinese text, no missing glyph
        use_svg_display()
        self.fig, self.ax = plt.subplots(figsize=figsize, layout='tight')
        plt.close(self.fig)  # shown through the display handle only
        self.labels = (xlabel, ylabel, legend or [], xlim, ylim, xscale,
                       yscale)
        self.X, self.Y, self.fmts, self.handle = None, None, fmts, None

    def add(self, x, y):
        if not hasattr(y, '__len__'):
            y = [y]
        n = len(y)
        if not hasattr(x, '__len__'):
            x = [x] * n
        if not self.X:
            self.X = [[] for _ in range(n)]
        if not self.Y:
            self.Y = [[] for _ in range(n)]
        for i, (a, b) in enumerate(zip(x, y)):
            if a is not None and b is not None:
                self.X[i].append(a)
                self.Y[i].append(b)
        ax = self.ax
        ax.cla()
        for xs, ys, fmt in zip(self.X, self.Y, self.fmts):
            ax.plot(xs, ys, fmt)
        xlabel, ylabel, legend, xlim, ylim, xscale, yscale = self.labels
        # Labels that d2lpar's catalog knows ('epoch', 'test acc', ...)
        # appear in the lesson's language
        ax.set_xlabel(None if xlabel is None else _(xlabel))
        ax.set_ylabel(None if ylabel is None else _(ylabel))
        ax.set_xscale(xscale)
        ax.set_yscale(yscale)
        ax.set_xlim(xlim)
        ax.set_ylim(ylim)
        if legend:
            ax.legend([_(label) for label in legend])
        ax.grid()
        from IPython import display
        if self.handle is None:
            self.handle = display.display(self.fig, display_id=True)
        else:
            self.handle.update(self.fig)


def plot_scaling(results, title=None):
    """Seconds per epoch and test accuracy against the number of devices,
    from a list of `TrainResult`, with the ideal linear speedup drawn from
    the one-device run."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    results = sorted(results, key=lambda r: len(r.devices))
    ks = [len(r.devices) for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(7, 2.6))
    ax1.plot(ks, [r.sec_per_epoch for r in results], 'o-',
             label=_('measured'))
    base = results[0].sec_per_epoch * ks[0]
    ax1.plot(ks, [base / k for k in ks], 'k--', label=_('ideal (t1 / k)'))
    ax1.set_xlabel(_('devices'))
    ax1.set_ylabel(_('seconds per epoch'))
    ax1.set_ylim(bottom=0)
    ax1.legend(fontsize=8)
    ax2.plot(ks, [r.test_acc for r in results], 'o-', color='tab:green')
    ax2.set_xlabel(_('devices'))
    ax2.set_ylabel(_('test accuracy'))
    ax2.set_ylim(0, 1)
    for ax in (ax1, ax2):
        ax.set_xticks(ks)
    if title:
        fig.suptitle(title, fontsize=10)
    plt.tight_layout()
    plt.show()


def plot_allreduce(rows, *, copy_bandwidth=None, link=None, title=None):
    """Time of each allreduce against message size, one panel per device
    count, with a dashed line for the limit that the devices set. On CPU
    stand-ins, all in one memory, that is `copy_bandwidth` (bytes/s, read
    + write, from `copy_bandwidth(cpu())`): k replicas of N bytes must at
    least be read and written once, 2kN bytes. On GPUs the data crosses
    the link between them, so the line is the ring allreduce of the cost
    model on `link` (a key of `LINKS`, from `gpu_link()`), and there is
    none when `link` is None."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    counts = sorted({r['devices'] for r in rows})
    fig, axes = plt.subplots(1, len(counts), figsize=(3.3 * len(counts), 2.8),
                             squeeze=False, sharey=True)
    for ax, k in zip(axes[0], counts):
        for algo in dict.fromkeys(r['algorithm'] for r in rows):
            mine = [r for r in rows if r['devices'] == k
                    and r['algorithm'] == algo]
            ax.loglog([r['bytes'] for r in mine],
                      [r['seconds'] for r in mine], 'o-', label=algo)
        xs = sorted({r['bytes'] for r in rows if r['devices'] == k})
        on_gpus = any(r.get('on') == 'gpu' for r in rows
                      if r['devices'] == k)
        if on_gpus and link is not None:
            ax.loglog(xs, [allreduce_time(x, k, link) for x in xs], 'k--',
                      label=_('ring model, {link}').format(
                          link=_cost.as_link(link).label))
        elif not on_gpus and copy_bandwidth:
            ax.loglog(xs, [2 * k * x / copy_bandwidth for x in xs], 'k--',
                      label=_('CPU memory: 2kN bytes at {rate:.3g} GB/s')
                      .format(rate=copy_bandwidth / 1e9))
        ax.set_title((_('{k} GPUs') if on_gpus else _('{k} CPU stand-ins'))
                     .format(k=k), fontsize=10)
        ax.set_xlabel(_('bytes per device'))
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(_('seconds'))
    if title:
        fig.suptitle(title, fontsize=10)
    plt.tight_layout()
    plt.show()


def plot_drift(drift, title=None):
    """The largest absolute difference between the parameters of two runs
    after each step (`drift`, from `parameter_drift`), on a log scale."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    steps = range(1, len(drift) + 1)
    fig, ax = plt.subplots(figsize=(4.5, 2.6))
    # A difference of exactly 0 has no place on a log scale: draw it at the
    # bottom of the chart
    floor = min([d for d in drift if d > 0], default=1e-9) / 10
    ax.semilogy(steps, [max(d, floor) for d in drift], 'o-', ms=3)
    # Up to 1, the size of a weight: a gap of 1e-6 must look small
    ax.set_ylim(min(floor, 1e-9), max(1.0, 2 * max(drift, default=0)))
    ax.set_xlabel(_('step'))
    ax.set_ylabel(_('largest |difference|'))
    ax.set_title(title or _('parameters on 1 device vs on 2 devices'),
                 fontsize=10)
    plt.tight_layout()
    plt.show()


# --------------------------------------------------------------------------
# The processes of a multi-process run (d2lpar.distributed)
# --------------------------------------------------------------------------
def _as_list(results):
    # One DistributedResult (d2lpar.distributed), or a list of them
    return [results] if hasattr(results, 'processes') else list(results)


def _rows(results):
    for r in _as_list(results):
        label = (_('{framework} x{n}: rank {rank}') if r.framework == 'torch'
                 else _('{framework} x{n}: worker {rank}'))
        for p in r.processes:
            other = max(0.0, p['seconds_total'] - p['seconds_compute']
                        - p['seconds_communication'])
            yield (label.format(framework=r.framework, n=r.num_workers,
                                rank=p['rank']), p, other)


# The columns of print_processes: heading, width (at least), format
_COLUMNS = [(N_('process'), 22, None), (N_('steps'), 6, 'd'),
            (N_('examples'), 9, 'd'), (N_('compute s'), 11, '.3f'),
            (N_('comm. s'), 9, '.3f'), (N_('total s'), 9, '.3f'),
            (N_('comm. %'), 9, '.0%')]


def print_processes(results):
    """A table of what each process of one or more runs measured."""
    rows = list(_rows(results))
    # A column is as wide as its heading (in the lesson's language) and,
    # for the first, its labels need
    heads = [_(name) for name, width, spec in _COLUMNS]
    widths = [max(width, display_width(head) + 1)
              for head, (name, width, spec) in zip(heads, _COLUMNS)]
    widths[0] = max([widths[0]] + [display_width(label) + 1
                                   for label, p, other in rows])
    head = pad(heads[0], widths[0]) + ''.join(
        pad(h, w, '>') for h, w in zip(heads[1:], widths[1:]))
    print(head)
    print('-' * display_width(head))
    for label, p, other in rows:
        share = p['seconds_communication'] / p['seconds_total']
        values = [p['steps'], p['examples'], p['seconds_compute'],
                  p['seconds_communication'], p['seconds_total']]
        cells = [number(v, spec) for v, (name, width, spec) in
                 zip(values + [share], _COLUMNS[1:])]
        print(pad(label, widths[0]) + ''.join(
            pad(c, w, '>') for c, w in zip(cells, widths[1:])))


def plot_processes(results, title=None, ax=None):
    """Stacked bars, one per process: compute, communication, and the
    rest of the training loop's time (data, updates, waiting)."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    rows = list(_rows(results))[::-1]
    if ax is None:
        ax = plt.subplots(figsize=(6, 0.4 * len(rows) + 1.0))[1]
    labels = [label for label, _p, _other in rows]
    left = [0.0] * len(rows)
    for key, kind, color in (
            ('seconds_compute', 'compute', KIND_COLORS['compute']),
            ('seconds_communication', 'communication',
             KIND_COLORS['copy']),
            (None, 'other', KIND_COLORS['other'])):
        widths = [other if key is None else p[key]
                  for _label, p, other in rows]
        ax.barh(labels, widths, left=left, color=color,
                label=_(KIND_LABELS[kind]))
        left = [a + w for a, w in zip(left, widths)]
    ax.set_xlabel(_('seconds'))
    ax.legend(fontsize=8, frameon=False, loc='lower left',
              bbox_to_anchor=(1.0, 0.0))
    if title:
        ax.set_title(title, fontsize=10)
    plt.tight_layout()
    plt.show()
    return ax
