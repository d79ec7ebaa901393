"""The report: a markdown section per part of the benchmark."""

import os

from tools.bench.settings import (
    CONCISE, CONCISE_STANDINS, DATA_DIR, KB, LESSON1_A, LESSON1_B,
    LESSON1_SIZE, MB, ROOT, STANDIN_REPS_FULL, STANDIN_REPS_QUICK)
from tools.bench.sections import ratio


def md_table(headers, rows):
    lines = ['| ' + ' | '.join(headers) + ' |',
             '| ' + ' | '.join('---' for _ in headers) + ' |']
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


def fmt_bytes(n):
    if n >= MB:
        return f'{n / MB:.3g} MB'
    return f'{n / KB:.3g} KB'


def fmt_sig(x, digits=3):
    return f'{x:.{digits}g}' if x < 10 ** digits else f'{x:.0f}'


def fmt_eps(x):
    return 'n/a' if x is None else f'{x:.0f}'


def fmt_ratio(x, digits=2):
    return '—' if x is None else f'{x:.{digits}f}x'


def report_standins(res):
    out = ['## 0. CPU stand-ins', '',
           f'Two CPU stand-ins (`d2l.try_devices(2)`: each half of the '
           f'cores with its own worker) against one, with the calls of the '
           f'lessons themselves and the default thread settings; medians of '
           f'{STANDIN_REPS_QUICK}-{STANDIN_REPS_FULL} rounds. Lesson 1: 50 '
           f'products of {LESSON1_SIZE}x{LESSON1_SIZE} matrices per device; '
           f'compute and copy: 50 products of {LESSON1_A} by {LESSON1_B} '
           f'matrices, each followed by its copy on the copy queue. Lesson 3: '
           f'`train_concise`, ResNet-18 width {CONCISE_STANDINS["width"]}, '
           f'{CONCISE_STANDINS["num_train"]} examples, batch '
           f'{CONCISE_STANDINS["batch_size"]} per device. On one host the '
           f'limits are 0.50 for the first (both halves busy all the time), '
           f'the longer part over the sum of both for the second (in '
           f'brackets), and 2.00x for the last.', '']
    rows = []
    for fw in ('torch', 'mxnet'):
        r = res.get(fw) or {}
        if 'error' in r:
            rows.append([fw, 'no data', r['error'][:80], '—'])
            continue
        floor = r['lesson1'].get('copy_floor')
        rows.append([fw, f'{r["lesson1"]["both_over_sum"]:.2f}',
                     f'{r["lesson1"]["copy_over_sum"]:.2f}'
                     + (f' ({floor:.2f})' if floor else ''),
                     fmt_ratio(r['lesson3']['two_over_one'])])
    out.append(md_table(['backend', 'lesson 1: both / sum of each alone',
                         'lesson 1: compute and copy / sum',
                         'lesson 3: 2 stand-ins / 1 (examples/s)'], rows))
    return '\n'.join(out)


def report_allreduce(res):
    out = ['## 1. Allreduce', '']
    bw = res['copy_bandwidth']
    parts = [f'{b}: ' + ', '.join(f'{x / 1e9:.1f}' for x in v) + ' GB/s'
             for b, v in bw.items() if v]
    if res['limit_bandwidth']:
        out.append(f'Memory-copy bandwidth, `d2l.copy_bandwidth()` (64 MB, '
                   f'bytes read + written per second, best of 3, at the '
                   f'start and the end of each backend\'s run): '
                   f'{"; ".join(parts)}. The one-host limit below uses the '
                   f'highest, {res["limit_bandwidth"] / 1e9:.1f} GB/s: k '
                   f'replicas of N bytes must at least be read and written '
                   f'once, so floor = 2kN / bandwidth and fraction = floor '
                   f'/ time. That is the limit of CPU stand-ins, which share '
                   f'one memory; on GPUs the limit is the link between them, '
                   f'and the floor is the ring of `d2l.allreduce_time` on '
                   f'the link `d2l.gpu_link()` reports.')
    out.append(f'Best of {res["repeat"]} after one warm-up; algbw = N / '
               f'time, busbw = algbw * 2(k-1)/k (nccl-tests). Devices are '
               f'`d2l.try_devices(k)` (CPU stand-ins here). gloo: '
               f'{max(res["counts"])} processes on 127.0.0.1, the first k '
               f'form the group (the others wait at a barrier); each run '
               f'follows a barrier and the slowest rank counts.')
    out.append('A fraction above 100% means that the data stayed in the CPU '
               'caches, which are faster than memory; the limit is for '
               'memory. MXNet\'s copies run at its own copy bandwidth (above);'
               ' its allreduce copies between contexts into fresh arrays, its '
               'ring reads the other stand-ins\' chunks in place (one memory) '
               'and copies only in the all-gather, but its steps run one '
               'after the other (MXNet orders operators by whole arrays, and '
               'each step writes an array the next one reads); '
               'direct_allreduce sums each chunk into a buffer of its own, so '
               'the stand-ins add and copy at the same time.')
    for backend, error in res['errors'].items():
        out.append(f'\n**{backend}: no data** ({error})')
    headers = ['algorithm', 'N', 'time (ms)', 'algbw (GB/s)',
               'busbw (GB/s)', 'floor (ms)', 'fraction of limit',
               'bytes moved (cost model)', 'busiest link (cost model)']
    for k in res['counts']:
        rows = []
        for n in res['sizes']:
            for r in res['rows']:
                if r['devices'] != k or r['bytes'] != n:
                    continue
                link = fmt_bytes(r['busiest_link'])
                if r['model'] == 'naive':
                    link += ' (device 0)'
                elif r['model'] == 'gloo':
                    link += ' (ring-like)'
                elif r['model'] == 'direct':
                    link += ' per device'
                else:
                    link += ' per link'
                rows.append([
                    r['label'], fmt_bytes(n), fmt_sig(1e3 * r['seconds']),
                    fmt_sig(r['algbw'] / 1e9), fmt_sig(r['busbw'] / 1e9),
                    fmt_sig(1e3 * r['floor_seconds'])
                    if r['floor_seconds'] else '—',
                    f'{r["fraction"]:.0%}' if r['fraction'] else '—',
                    fmt_bytes(r['bytes_moved']), link])
        out += ['', f'### {k} devices', '', md_table(headers, rows)]
    out += ['', 'Cost model: naive moves 2(k-1)N in all, all of it through '
            'device 0; the ring moves 2(k-1)N too, but only 2(k-1)N/k on '
            'each link; gloo is ring-like. On one host the ring moves as '
            'many bytes as the naive version, so it cannot win here; direct '
            'moves 2(k-1)N too, 2(k-1)N/k from each device (every device '
            'sums a chunk, then sends it to every other one); across '
            'devices with their own links, the naive version pushes 2(k-1)N '
            'through one device while the ring puts 2(k-1)/k·N on each '
            'link.']
    return '\n'.join(out)


ROWS = [  # (backend, run, devices, loop, compared with)
    ('torch', 'chapter', 1, "chapter's loop", None),
    ('torch', 'd2l.train', 1, 'd2l.train', 'chapter/1'),
    ('torch', 'chapter', 2, "chapter's loop", None),
    ('torch', 'd2l.train', 2, 'd2l.train', 'chapter/2'),
    ('torch', 'd2l.train-1t', 1, 'd2l.train, 1 thread', 'd2l.train/1'),
    ('torch', 'd2l.train-1t', 2, 'd2l.train, 1 thread', 'd2l.train/2'),
    ('torch', 'ddp', 2, 'DDP, 2 gloo processes', 'd2l.train/2'),
    ('mxnet', 'chapter', 1, "chapter's loop", None),
    ('mxnet', 'd2l.train', 1, 'd2l.train', 'chapter/1'),
    ('mxnet', 'gluon', 1, 'Gluon, kvstore device', 'd2l.train/1'),
    ('mxnet', 'chapter', 2, "chapter's loop", None),
    ('mxnet', 'd2l.train', 2, 'd2l.train', 'chapter/2'),
    ('mxnet', 'gluon', 2, 'Gluon, kvstore device', 'd2l.train/2'),
]


def ref_label(ref):
    """'chapter/1' -> "chapter's loop, 1 dev"."""
    run, k = ref.split('/')
    name = "chapter's loop" if run == 'chapter' else run
    return f'{name}, {k} dev'


def report_training(res):
    cfg, runs = res['config'], res['runs']
    out = ['## 2. Training throughput', '',
           f'LeNet of the chapter, global batch {cfg["batch_size"]}, lr '
           f'{cfg["lr"]}, {cfg["num_train"]} training and {cfg["num_test"]} '
           f'test examples, {cfg["num_epochs"]} epoch(s) per run after a '
           f'warm-up; each run {cfg["reps"]} time(s), interleaved (ABBA), '
           f'best kept. *train* = examples per second of the training loop '
           f'(the chapter\'s timer, without evaluation); *end-to-end* adds '
           f'the evaluation after each epoch (wall clock). Ratios are of '
           f'*train* (of end-to-end in brackets); between runs of one '
           f'process, the median over the rounds of the ratio within a '
           f'round; between processes (DDP, MXNET_CPU_TEMP_COPY), best over '
           f'best.']
    for name, error in res['errors'].items():
        out.append(f'\n**{name}: no data** ({error})')
    rows = []
    for backend, run, k, loop, ref in ROWS:
        key = f'{backend}:{run}/{k}'
        r = runs.get(key)
        if r is None:
            continue
        ref_key = f'{backend}:{ref}' if ref else None
        rr = ratio(runs, key, ref_key) if ref else None
        re2e = ratio(runs, key, ref_key, 'e2e_eps') if ref else None
        rows.append([backend, loop, k, f'{r["train_eps"]:.0f}',
                     f'{r["e2e_eps"]:.0f}', f'{r["test_acc"]:.2f}'
                     if r['test_acc'] is not None else '—',
                     f'{r["spread"]:.0%}' if len(r['reps']) > 1 else '—',
                     ref_label(ref) if ref else 'baseline',
                     f'{fmt_ratio(rr)} ({fmt_ratio(re2e)})' if ref else '—'])
    out += ['', md_table(['backend', 'loop', 'devices', 'train ex/s',
                          'end-to-end ex/s', 'test acc', 'spread of reps',
                          'compared with', 'ratio'], rows)]
    out += ['', 'The chapter\'s loop is the book\'s `train` with d2lpar\'s '
            '`train_batch`, `get_params` and `lenet`: it waits after every '
            'minibatch (`d2l.synchronize(devices)` for PyTorch, a no-op on '
            'CPU; `npx.waitall()` for MXNet) and evaluates with '
            '`d2l.evaluate_accuracy_gpu` of the `d2l` package, which reads '
            'every batch\'s accuracy. DDP ranks run one thread each '
            '(OMP_NUM_THREADS = cores / ranks, as torchrun sets it); the '
            'other runs use the frameworks\' default threads, but *d2l.train, '
            '1 thread*, which calls `torch.set_num_threads(1)` first.']
    scaling = ['', '| backend | d2l.train 2 dev / 1 dev | chapter\'s loop '
               '2 / 1 | peer 2 / 1 |', '| --- | --- | --- | --- |']
    for backend, peer in (('torch', None), ('mxnet', 'gluon')):
        s = ratio(runs, f'{backend}:d2l.train/2', f'{backend}:d2l.train/1')
        c = ratio(runs, f'{backend}:chapter/2', f'{backend}:chapter/1')
        p = ratio(runs, f'{backend}:{peer}/2', f'{backend}:{peer}/1') \
            if peer else None
        scaling.append(f'| {backend} | {fmt_ratio(s)} | {fmt_ratio(c)} | '
                       + (f'Gluon {fmt_ratio(p)}' if peer else
                          'DDP 2 proc / d2l.train 1 dev '
                          + fmt_ratio(ratio(runs, 'torch:ddp/2',
                                            'torch:d2l.train/1'))) + ' |')
    out += scaling
    out += ['', '### Lesson 3: concise training', '',
            'ResNet-18 (width {width}), {num_train} training and {num_test} '
            'test examples, batch {batch_size}, 1 device, end-to-end '
            'examples/s (training and test evaluation, wall clock):'
            .format(**CONCISE), '']
    rows = []
    for backend in ('torch', 'mxnet'):
        ours = runs.get(f'{backend}:train_concise') or {}
        book = runs.get(f'{backend}:train_ch13') or {}
        rows.append([backend, fmt_eps(ours.get('train_eps')),
                     fmt_eps(book.get('train_eps')),
                     fmt_ratio(ratio(runs, f'{backend}:train_concise',
                                     f'{backend}:train_ch13'))])
    out.append(md_table(['backend', 'd2l.train_concise', 'd2l.train_ch13',
                         'ratio'], rows))
    out += ['', '### MXNET_CPU_TEMP_COPY', '',
            'd2lpar.mxnet sets it to 16 before importing MXNet unless it is '
            'set; MXNet\'s default is 4. `d2l.train` (MXNet), 2 devices, in '
            'fresh processes alternating 4, 16, 4, 16 (one in a quick run), '
            '2 runs each, best kept:', '']
    rows, temp = [], res['temp_copy']
    for value in ('4', '16'):
        t = temp.get(value) or {}
        if 'train_eps' in t:
            rows.append([value, f'{t["train_eps"]:.0f}', f'{t["e2e_eps"]:.0f}',
                         fmt_ratio(ratio(temp, value, '4'))])
        else:
            rows.append([value, 'no data', t.get('error', ''), '—'])
    out.append(md_table(['MXNET_CPU_TEMP_COPY', 'train ex/s',
                         'end-to-end ex/s', 'vs 4'], rows))
    return '\n'.join(out)


def report_notebooks(res):
    out = ['## 3. Lessons', '',
           'Each notebook run top to bottom with nbclient in a fresh '
           '`python3` kernel of the venv, cwd = its folder, D2LPAR_DATA = '
           f'`{os.path.relpath(DATA_DIR, ROOT)}/` (as the Makefile sets '
           'it), one after the other.']
    rows, total, n_est = [], 0.0, 0
    for r in res['rows']:
        if r['measured']:
            how = 'measured' + (f' — **error**: {r["error"]}'
                                if r['error'] else '')
        elif r['seconds'] is not None:
            n_est += 1
            how = (f'estimated from {r["estimated_from"]} ('
                   + ('same code' if r['same_code'] else
                      'code differs: run with --languages all') + ')')
        else:
            how = 'not run' + (f': {r["skipped"]}' if r.get('skipped')
                               else '')
        if r['seconds'] is not None:
            total += r['seconds']
        rows.append([f'`{r["notebook"]}`', f'{r["seconds"]:.1f}'
                     if r['seconds'] is not None else '—', how])
    rows.append(['**total**', f'**{total:.0f}** ({total / 60:.1f} min)',
                 'sum of the above'])
    out += ['', md_table(['notebook', 'seconds', ''], rows)]
    if n_est:
        out += ['', f'{n_est} notebook(s) were not run here, to keep `make '
                'bench` short; their time is that of the same lesson and '
                'framework in another language (same code cells up to '
                'comments where it says so). `--languages all` runs them '
                'all.']
    out += ['', 'The sum is the estimate of a serial nbval run of these '
            'notebooks. `make test` runs nbval with `-n 2` (two notebooks '
            'at a time, the package tests beside them) on 2 cores, so its '
            'wall time lies roughly between half the sum and the sum.']
    res['total_seconds'] = total
    return '\n'.join(out)
