"""Lesson 2's check, over several seeds: the test accuracies of the
one-device and two-device runs of `train`, with the lesson's settings on
a CPU (12000 training and 2000 test examples, 3 epochs, batch 256,
learning rate 0.1), from parameters drawn with each seed. The lesson
runs seed 0 and checks a gap of at most 2 points; this is the spread
behind that check, on this machine.

CI runs on two CPU kinds (AMD EPYC, Intel Xeon with AMX), whose kernels
add up in other orders and so round otherwise. Each framework runs twice:
with the kernels it picks here, and with its AVX2 kernels forced (the
environment variables of `KERNELS`), which round as another CPU would.
A bound that holds for both, over every seed, is one that does not
depend on the CPU's rounding; a seed changes far more than rounding does
(every parameter of the first step)."""

import os
import statistics

from tools.bench.running import run_worker
from tools.bench.settings import log

GAP_LESSON = dict(batch_size=256, lr=0.1, num_train=12000, num_test=2000,
                  num_epochs=3)
GAP_SEEDS_FULL, GAP_SEEDS_QUICK = 6, 2
TARGET_GAP = 0.02  # what the lesson's check allows
# The kernels of a CPU with AVX2 and no AVX-512 (PyTorch's own and
# oneDNN's, which MXNet uses too)
KERNELS = {
    'torch': {'ATEN_CPU_CAPABILITY': 'avx2', 'ONEDNN_MAX_CPU_ISA': 'AVX2'},
    'mxnet': {'DNNL_MAX_CPU_ISA': 'AVX2', 'ONEDNN_MAX_CPU_ISA': 'AVX2'}}


def worker_gap(spec):
    """{'gaps': [...], 'accs': [[one, two], ...], 'kernels': ...} for
    seeds 0.."""
    if spec['framework'] == 'torch':
        import torch
        from d2lpar import torch as d2l
        seed = torch.manual_seed
        kernels = torch.backends.cpu.get_cpu_capability()
    else:
        from mxnet import npx
        from d2lpar import mxnet as d2l
        seed = npx.random.seed
        kernels = 'oneDNN, ISA at most ' + os.environ.get(
            'DNNL_MAX_CPU_ISA', "the CPU's")
    cfg = dict(GAP_LESSON)
    lr, batch_size = cfg.pop('lr'), cfg.pop('batch_size')
    gaps, accs = [], []
    for s in range(spec['seeds']):
        seed(s)
        params = d2l.lenet_params()
        one, two = (d2l.train(k, batch_size, lr, params=params, plot=False,
                              **cfg) for k in (1, 2))
        gaps.append(abs(one.test_acc - two.test_acc))
        accs.append([one.test_acc, two.test_acc])
        log(f'gap {spec["framework"]} ({kernels}) seed {s}: '
            f'{gaps[-1]:.4f}')
    return {'gaps': gaps, 'accs': accs, 'kernels': kernels}


def section_gap(args):
    seeds = GAP_SEEDS_QUICK if args.quick else GAP_SEEDS_FULL
    results = {}
    for fw in ('torch', 'mxnet'):
        for forced in (False, True):
            results[fw + (' avx2' if forced else '')] = run_worker(
                'gap', {'framework': fw, 'seeds': seeds}, 900,
                f'gap-{fw}' + ('-avx2' if forced else ''),
                env_extra=KERNELS[fw] if forced else None)
    return results


def report_gap(res):
    c = GAP_LESSON
    out = ['## 2b. Lesson 2a: one device against two, over seeds', '',
           f'`train` with the lesson\'s CPU settings ({c["num_train"]} '
           f'training and {c["num_test"]} test examples, {c["num_epochs"]} '
           f'epochs, batch {c["batch_size"]}, learning rate {c["lr"]}), on '
           f'one stand-in and on two, from the parameters that each seed '
           f'draws; the gap is the difference of the two test accuracies '
           f'(the lesson checks at most {TARGET_GAP:.0%}).', '',
           '| backend | kernels | seeds | gap: median | largest | '
           'accuracies (1 / 2 devices) |',
           '| --- | --- | --- | --- | --- | --- |']
    for fw, r in res.items():
        if 'error' in r:
            out.append(f'| {fw} | — | no data | {r["error"][:80]} | — '
                       f'| — |')
            continue
        accs = ', '.join(f'{a:.1%}/{b:.1%}' for a, b in r['accs'])
        out.append(f'| {fw} | {r["kernels"]} | {len(r["gaps"])} | '
                   f'{statistics.median(r["gaps"]):.2%} | '
                   f'{max(r["gaps"]):.2%} | {accs} |')
    return '\n'.join(out)


def gap_targets(res, verdict):
    lines = []
    for fw, r in (res or {}).items():
        if 'error' in r:
            lines.append((verdict(None), f'{fw} lesson 2 gap: no data'))
            continue
        worst = max(r['gaps'])
        lines.append((verdict(worst <= TARGET_GAP),
                      f'{fw} lesson 2 ({r["kernels"]} kernels), largest '
                      f'gap between one and two devices over '
                      f'{len(r["gaps"])} seeds: {worst:.2%} '
                      f'(target <= {TARGET_GAP:.0%})'))
    return lines
