"""The machine the benchmark ran on: versions, cores and the load from
other work, so that a reader can judge the seconds."""

import os
import platform
import time

from tools.bench.settings import CORES
from tools.bench.running import real_data_cached


def cpu_busy(seconds=1.0):
    """Fraction of the CPU time that was not idle over `seconds` (from
    /proc/stat): other work on the machine, before this run starts any."""
    def sample():
        with open('/proc/stat') as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total
    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1 - (idle1 - idle0) / max(1, total1 - total0)


def cpu_model():
    """The CPU's model name, as /proc/cpuinfo gives it (AMD EPYC or Intel
    Xeon on this project's machines; their kernels round differently)."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_notes():
    import importlib.metadata as md
    versions = {}
    for pkg in ('torch', 'mxnet', 'd2l', 'numpy'):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    return {'cores': CORES, 'platform': platform.platform(),
            'cpu': cpu_model(),
            'processor': platform.processor() or platform.machine(),
            'python': platform.python_version(), 'versions': versions,
            'loadavg_start': os.getloadavg()[0],
            'cpu_busy_before': cpu_busy(),
            'data': 'Fashion-MNIST (cached)' if real_data_cached()
            else 'stand-in (D2LPAR_OFFLINE=1 for the workers)'}


def load_line(notes):
    """The machine's load, and a warning when other work was running."""
    peak = max([load for _, load in notes['loadavg_trace']],
               default=notes['loadavg_end'])
    busy = notes['cpu_busy_before']
    line = ('CPU busy with other work in the second before the run: '
            + ('unknown' if busy is None else f'{busy:.0%}')
            + f'; load average (1 min) before it {notes["loadavg_start"]:.1f}'
            f', highest seen during it {peak:.1f}.')
    if busy is not None and busy > 0.25 or busy is None and \
            notes['loadavg_start'] > 0.5 * CORES:
        line += (f' **Other work was running on this {CORES}-core machine**: '
                 f'the seconds are inflated, and the ratios, though measured '
                 f'side by side, are noisier.')
    return line
