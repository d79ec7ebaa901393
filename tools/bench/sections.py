"""What is measured: each section runs its workers (see running.py) and
turns their raw results into the figures that the report shows and the
targets judge."""

import ast
import glob
import json
import os
import statistics
import time

from tools.bench.settings import (
    COUNTS_FULL, COUNTS_QUICK, DATA_DIR, LOG_DIR, MB,
    NOTEBOOK_CELL_TIMEOUT, REPEAT_FULL, REPEAT_QUICK, ROOT, SIZES_FULL,
    SIZES_QUICK, STANDIN_REPS_FULL, STANDIN_REPS_QUICK, TRAIN_FULL,
    TRAIN_QUICK, log)
from tools.bench.running import run_ranks, run_worker


ALGORITHMS = [  # (label, source, name in the rows, cost model)
    ('d2lpar.torch allreduce', 'torch', 'allreduce', 'naive'),
    ('d2lpar.torch ring_allreduce', 'torch', 'ring_allreduce', 'ring'),
    ('d2lpar.torch direct_allreduce', 'torch', 'direct_allreduce', 'direct'),
    ('d2lpar.mxnet allreduce', 'mxnet', 'allreduce', 'naive'),
    ('d2lpar.mxnet ring_allreduce', 'mxnet', 'ring_allreduce', 'ring'),
    ('d2lpar.mxnet direct_allreduce', 'mxnet', 'direct_allreduce', 'direct'),
    ('torch.distributed gloo all_reduce', 'gloo', 'all_reduce', 'gloo'),
]


def cost_model(model, k, n):
    """(bytes moved between devices in all, bytes on the busiest link)."""
    total = 2 * (k - 1) * n
    busiest = total if model == 'naive' else total / k
    return total, busiest


def section_standins(args):
    reps = STANDIN_REPS_QUICK if args.quick else STANDIN_REPS_FULL
    res = {}
    for fw in ('torch', 'mxnet'):
        res[fw] = run_worker('standins', {'framework': fw, 'reps': reps},
                             600, f'standins-{fw}')
    return res


def section_allreduce(args):
    sizes = SIZES_QUICK if args.quick else SIZES_FULL
    counts = COUNTS_QUICK if args.quick else COUNTS_FULL
    repeat = REPEAT_QUICK if args.quick else REPEAT_FULL
    spec = {'sizes': sizes, 'counts': counts, 'repeat': repeat}
    timeout = 300
    raw = {}
    for backend in ('torch', 'mxnet'):
        raw[backend] = run_worker('allreduce', dict(spec, backend=backend),
                                  timeout, f'allreduce-{backend}')
    r = run_ranks('gloo_allreduce', max(counts), spec, timeout, 'gloo')
    gloo_rows = r.get('rows', [])
    gloo_errors = [r['error']] if 'error' in r else []
    raw['gloo'] = {'rows': gloo_rows, 'errors': gloo_errors}

    bandwidths = {b: raw[b].get('copy_bandwidth', []) for b in ('torch',
                                                                'mxnet')}
    all_bw = [x for v in bandwidths.values() for x in v]
    limit_bw = max(all_bw) if all_bw else None
    rows = []
    for label, source, name, model in ALGORITHMS:
        for r in raw[source].get('rows', []):
            if r['algorithm'] != name:
                continue
            k, n, t = r['devices'], r['bytes'], r['seconds']
            if r.get('on') == 'gpu':  # the link's ring model, see worker
                floor = r.get('link_floor')
            else:  # CPU stand-ins: one memory, 2kN bytes at its bandwidth
                floor = 2 * k * n / limit_bw if limit_bw else None
            total, busiest = cost_model(model, k, n)
            rows.append(dict(r, label=label, backend=source, model=model,
                             floor_seconds=floor,
                             fraction=floor / t if floor else None,
                             bytes_moved=total, busiest_link=busiest))
    errors = {s: raw[s]['error'] for s in ('torch', 'mxnet')
              if 'error' in raw[s]}
    if gloo_errors:
        errors['gloo'] = '; '.join(gloo_errors)
    return {'sizes': sizes, 'counts': counts, 'repeat': repeat,
            'copy_bandwidth': bandwidths, 'limit_bandwidth': limit_bw,
            'rows': rows, 'errors': errors}


def best_fraction(res, backend, k=4, n=64 * MB):
    """The best fraction of the one-host limit among `backend`'s rows at
    (k, n), the algorithm that reached it, and the same time as a fraction
    of the limit set by the backend's own copy bandwidth."""
    rows = [r for r in res['rows'] if r['backend'] == backend
            and r['devices'] == k and r['bytes'] == n and r['fraction']]
    if not rows:
        return None, None, None
    best = max(rows, key=lambda r: r['fraction'])
    own = res['copy_bandwidth'].get(backend)
    own_fraction = 2 * k * n / max(own) / best['seconds'] if own else None
    return best['fraction'], best['algorithm'], own_fraction


def summarize(measurements, process):
    """Best of the repeated measurements, and their spread. `process`
    names the worker: runs of one worker were interleaved round by round,
    so their ratios can be taken round by round (see `ratio`)."""
    if not measurements:
        return None
    best = max(measurements, key=lambda m: m['train_eps'])
    eps = [m['train_eps'] for m in measurements]
    return dict(best, reps=measurements, process=process,
                spread=(max(eps) - min(eps)) / max(eps))


def section_training(args):
    cfg = dict(TRAIN_QUICK if args.quick else TRAIN_FULL)
    timeout = 200 if args.quick else 360
    res = {'config': cfg, 'errors': {}}
    torch_raw = run_worker('train_torch', cfg, timeout)
    ddp_raw = run_ranks('ddp', 2, cfg, timeout, 'ddp')
    mxnet_raw = run_worker('train_mxnet', cfg, timeout)
    # MXNET_CPU_TEMP_COPY is read when MXNet loads: one process per value,
    # alternating 4, 16, 4, 16 so that both see the machine alike.
    temp = {'4': {'runs': []}, '16': {'runs': []}}
    for i in range(1 if args.quick else 2):
        for value in ('4', '16'):
            r = run_worker('temp_copy', dict(cfg, reps=2), timeout,
                           f'temp-copy-{value}-{i}',
                           {'MXNET_CPU_TEMP_COPY': value})
            if 'error' in r:
                temp[value] = r
            elif 'runs' in temp[value]:
                temp[value]['runs'] += r['runs']
    for name, raw in (('torch', torch_raw), ('ddp', ddp_raw),
                      ('mxnet', mxnet_raw)):
        if 'error' in raw:
            res['errors'][name] = raw['error']
    runs = {}
    for backend, raw in (('torch', torch_raw), ('mxnet', mxnet_raw)):
        for label, ms in raw.get('runs', {}).items():
            runs[f'{backend}:{label}'] = summarize(ms, backend)
    if 'runs' in ddp_raw:
        runs['torch:ddp/2'] = summarize(ddp_raw['runs'], 'ddp')
    res['runs'] = runs
    res['raw'] = {'torch': torch_raw, 'ddp': ddp_raw, 'mxnet': mxnet_raw}
    res['temp_copy'] = {v: (summarize(r['runs'], f'temp_copy={v}')
                            if 'runs' in r else r)
                        for v, r in temp.items()}
    for backend, raw in (('torch', torch_raw), ('mxnet', mxnet_raw)):
        for label, ms in (raw.get('concise') or {}).items():
            runs[f'{backend}:{label}'] = summarize(ms, f'{backend} concise')
    return res


def ratio(runs, a, b, key='train_eps'):
    """Throughput of run `a` over run `b`. Runs of one process ran side by
    side, round after round: the median over the rounds of the ratio
    within a round, which a burst of other work on the machine spoils for
    one round only. Runs of different processes: best over best."""
    ra, rb = runs.get(a) or {}, runs.get(b) or {}
    if 'reps' not in ra or 'reps' not in rb:  # not measured, or an error
        return None
    if ra['process'] == rb['process'] and len(ra['reps']) == len(rb['reps']):
        return statistics.median(x[key] / y[key]
                                 for x, y in zip(ra['reps'], rb['reps']))
    return ra[key] / rb[key]


def code_key(path):
    """The code cells of a notebook, comments and layout ignored."""
    with open(path) as f:
        nb = json.load(f)
    key = []
    for cell in nb['cells']:
        if cell['cell_type'] != 'code':
            continue
        src = ''.join(cell['source'])
        try:
            key.append(ast.dump(ast.parse(src)))
        except SyntaxError:
            key.append(src)
    return key


def run_notebook(path):
    """Execute a notebook as nbval does (fresh python3 kernel, cwd = its
    folder, D2LPAR_DATA as the Makefile sets it); its wall time."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ, D2LPAR_DATA=DATA_DIR)
    client = NotebookClient(nb, timeout=NOTEBOOK_CELL_TIMEOUT,
                            kernel_name='python3', resources={
                                'metadata': {'path': os.path.dirname(path)}})
    os.makedirs(LOG_DIR, exist_ok=True)
    name = os.path.relpath(path, os.path.join(ROOT, 'notebooks'))
    with open(os.path.join(LOG_DIR, 'nb-' + name.replace('/', '-')
                           + '.log'), 'w') as kernel_log:
        start = time.perf_counter()
        try:
            client.execute(env=env, stderr=kernel_log)
            error = None
        except Exception as e:  # a failing cell, a timeout, a dead kernel
            error = f'{type(e).__name__}: {str(e).strip().splitlines()[-1]}'\
                if str(e).strip() else type(e).__name__
        seconds = time.perf_counter() - start
    return seconds, error


def section_notebooks(args, deadline):
    paths = sorted(glob.glob(os.path.join(ROOT, 'notebooks', '*', '*',
                                          '*.ipynb')))
    langs = None if args.languages == 'all' else args.languages.split(',')
    if args.quick and args.languages == 'en':
        chosen = [p for p in paths if '/en/' in p
                  and os.path.basename(p) == 'auto-parallelism.ipynb']
    else:
        chosen = [p for p in paths
                  if langs is None or p.split(os.sep)[-3] in langs]
    rows = []
    measured = {}
    for p in chosen:
        # Start a notebook only if it should end before the deadline,
        # guessing that it takes as long as the slowest one so far.
        guess = max([60] + [r['seconds'] for r in rows if r['seconds']])
        if time.monotonic() + guess > deadline:
            rows.append({'notebook': os.path.relpath(p, ROOT),
                         'seconds': None, 'measured': False, 'error': None,
                         'skipped': f'the --budget of {args.budget} s was '
                                    f'spent'})
            log(f'notebook {os.path.relpath(p, ROOT)}: skipped (budget)')
            continue
        log(f'notebook {os.path.relpath(p, ROOT)} ...')
        seconds, error = run_notebook(p)
        lang, fw, name = p.split(os.sep)[-3:]
        measured[(fw, name)] = measured.get((fw, name)) or (lang, seconds,
                                                            code_key(p))
        rows.append({'notebook': os.path.relpath(p, ROOT), 'seconds': seconds,
                     'measured': True, 'error': error})
        log(f'  {seconds:.1f} s' + (f' ({error})' if error else ''))
    for p in paths:
        if p in chosen:
            continue
        lang, fw, name = p.split(os.sep)[-3:]
        ref = measured.get((fw, name))
        if ref is None:
            rows.append({'notebook': os.path.relpath(p, ROOT),
                         'seconds': None, 'measured': False, 'error': None})
            continue
        rows.append({'notebook': os.path.relpath(p, ROOT),
                     'seconds': ref[1], 'measured': False,
                     'estimated_from': ref[0],
                     'same_code': code_key(p) == ref[2], 'error': None})
    rows.sort(key=lambda r: r['notebook'])
    return {'rows': rows, 'languages': args.languages}
