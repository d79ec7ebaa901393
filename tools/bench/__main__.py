"""``make bench`` (``python -m tools.bench``): run the sections, print the
report and write it to build/bench/; with the hidden ``--worker``
option, be one of the workers instead."""

import argparse
import datetime
import glob
import json
import os
import sys
import time

from tools import bench
from tools.bench.settings import CORES, LOAD_TRACE, LOG_DIR, OUT_DIR, ROOT, log
from tools.bench.workers import (
    worker_allreduce, worker_ddp, worker_gloo_allreduce, worker_temp_copy,
    worker_train_mxnet, worker_train_torch)
from tools.bench.standins import worker_standins
from tools.bench.sections import (
    section_allreduce, section_notebooks, section_standins,
    section_training)
from tools.bench.report import (
    report_allreduce, report_notebooks, report_standins, report_training)
from tools.bench.targets import targets, verdict
from tools.bench.gap import gap_targets, report_gap, section_gap, worker_gap
from tools.bench.machine import load_line, machine_notes


WORKERS = {'allreduce': worker_allreduce,
           'gloo_allreduce': worker_gloo_allreduce,
           'train_torch': worker_train_torch,
           'train_mxnet': worker_train_mxnet,
           'temp_copy': worker_temp_copy,
           'ddp': worker_ddp, 'standins': worker_standins,
           'gap': worker_gap}


def worker_main(name, spec, out):
    # Settle pyplot's backend now: d2l's Animator (in train_ch13) creates an
    # IPython shell, and matplotlib 3.7 then asks IPython 9 for a function
    # it no longer has when it picks a backend.
    import matplotlib.pyplot as plt
    plt.switch_backend('Agg')
    result = WORKERS[name](spec)
    if spec.get('rank', 0) == 0:
        with open(out, 'w') as f:
            json.dump(result, f)
    else:
        with open(out, 'w') as f:
            json.dump({'rank': spec['rank']}, f)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='python -m tools.bench',
        description=bench.__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true',
                        help='smoke run: fewer sizes, repeats and examples')
    parser.add_argument('--skip-notebooks', action='store_true',
                        help='skip section 3 (the lessons)')
    parser.add_argument('--languages', default='en',
                        help="notebook languages to run, comma-separated, "
                             "or 'all' (default: en; the others are "
                             "estimated from it)")
    parser.add_argument('--budget', type=float, default=570,
                        help='seconds for the whole run: notebooks that '
                             'would end after it are skipped (default: '
                             '570)')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    parser.add_argument('--spec', help=argparse.SUPPRESS)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker, json.loads(args.spec), args.out)
        return 0

    start, start_mono = time.perf_counter(), time.monotonic()
    os.makedirs(LOG_DIR, exist_ok=True)
    for old in glob.glob(os.path.join(LOG_DIR, '*.log')):
        os.remove(old)  # the logs of this run only
    notes = machine_notes()
    log(f'{"quick" if args.quick else "full"} run; logs in '
        f'{os.path.relpath(LOG_DIR, ROOT)}/')
    results = {'meta': notes, 'args': vars(args)}
    results['standins'] = section_standins(args)
    results['allreduce'] = section_allreduce(args)
    results['training'] = section_training(args)
    results['gap'] = section_gap(args)
    if not args.skip_notebooks:
        results['notebooks'] = section_notebooks(
            args, deadline=start_mono + args.budget)

    notes['loadavg_end'] = os.getloadavg()[0]
    notes['loadavg_trace'] = LOAD_TRACE
    notes['seconds'] = time.perf_counter() - start
    v = notes['versions']
    head = ['# d2lpar benchmark', '',
            f'{datetime.datetime.now():%Y-%m-%d %H:%M}, '
            f'{"quick" if args.quick else "full"} run. {CORES} CPU cores '
            f'({notes.get("cpu", "unknown CPU")}), '
            f'{notes["platform"]}; no GPU unless the tables say so (CPU '
            f'stand-in devices). torch {v["torch"]}, mxnet {v["mxnet"]}, d2l '
            f'{v["d2l"]}. Data: {notes["data"]}.',
            load_line(notes)]
    sections = [report_standins(results['standins']),
                report_allreduce(results['allreduce']),
                report_training(results['training']),
                report_gap(results['gap'])]
    if 'notebooks' in results:
        sections.append(report_notebooks(results['notebooks']))
    lines = targets(results) + gap_targets(results['gap'], verdict)
    results['targets'] = [{'verdict': a, 'target': b} for a, b in lines]
    tail = ['## Targets', ''] + [f'- {a}: {b}' for a, b in lines] + [
        '', f'Benchmark wall time: {notes["seconds"]:.0f} s.']
    text = '\n\n'.join(['\n'.join(head)] + sections + ['\n'.join(tail)]) + '\n'
    print(text)
    with open(os.path.join(OUT_DIR, 'results.md'), 'w') as f:
        f.write(text)
    with open(os.path.join(OUT_DIR, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1, default=str)
    log(f'wrote {os.path.relpath(OUT_DIR, ROOT)}/results.md and results.json '
        f'in {notes["seconds"]:.0f} s')
    if full_run(args):
        with open(PERFORMANCE, 'w') as f:
            f.write(performance_page(text))
        log(f'wrote {os.path.relpath(PERFORMANCE, ROOT)}')
    else:
        log(f'{os.path.relpath(PERFORMANCE, ROOT)} left as it is (not a '
            f'full run)')
    return 0


PERFORMANCE = os.path.join(ROOT, 'docs', 'performance.md')
READING = '''\
# Performance

This page is written by `make bench` (`python -m tools.bench`, about 9
minutes on 2 cores); nothing in it is edited by hand. Run `make bench`
again on your machine and commit the page it writes, or read
`build/bench/results.md`, which every run writes (also the `--quick`,
`--skip-notebooks` and `--languages` runs, which leave this page as it
is).

How to read it. Everything is measured side by side in one run and
reported as ratios and medians of repeats, so that a figure means
something on a noisy machine; the load line says how busy the machine
was. A CPU stand-in device is half of the cores: two of them are faster
than one but never faster than the whole CPU, so these ratios say that
the lessons show parallelism, not that a laptop trains faster with them.
On one host the ring allreduce moves as many bytes as the simple one
(2(k-1)N), so it cannot win there; across devices with links of their
own, the simple one pushes 2(k-1)N bytes through one device while the
ring puts 2(k-1)N/k on each link.

The run below:

'''


def full_run(args):
    """Whether this is `make bench` as is, the run that docs/performance.md
    records (a smoke run, one without the lessons or one with other
    languages is not)."""
    return not (args.quick or args.skip_notebooks) and args.languages == 'en'


def performance_page(report):
    """docs/performance.md: how to read it, then the run's report, its
    headings one level down."""
    body = '\n'.join('#' + line if line.startswith('#') else line
                     for line in report.splitlines())
    return READING + body + '\n'


if __name__ == '__main__':
    sys.exit(main())
