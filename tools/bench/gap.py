"""Lesson 2's check, over several seeds: the test accuracies of the
one-device and two-device runs of `train`, with the lesson's settings on
a CPU (12000 training and 2000 test examples, 3 epochs, batch 256,
learning rate 0.1), from parameters drawn with each seed. The lesson
runs seed 0 and checks a gap of at most 2 points; this is the spread
behind that check, on this machine."""

import statistics

from tools.bench.running import run_worker
from tools.bench.settings import log

GAP_LESSON = dict(batch_size=256, lr=0.1, num_train=12000, num_test=2000,
                  num_epochs=3)
GAP_SEEDS_FULL, GAP_SEEDS_QUICK = 6, 2
TARGET_GAP = 0.02  # what the lesson's check allows


def worker_gap(spec):
    """{'gaps': [...], 'accs': [[one, two], ...]} for seeds 0.."""
    if spec['framework'] == 'torch':
        import torch
        from d2lpar import torch as d2l
        seed = torch.manual_seed
    else:
        from mxnet import npx
        from d2lpar import mxnet as d2l
        seed = npx.random.seed
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
        log(f'gap {spec["framework"]} seed {s}: {gaps[-1]:.4f}')
    return {'gaps': gaps, 'accs': accs}


def section_gap(args):
    seeds = GAP_SEEDS_QUICK if args.quick else GAP_SEEDS_FULL
    return {fw: run_worker('gap', {'framework': fw, 'seeds': seeds}, 900,
                           f'gap-{fw}')
            for fw in ('torch', 'mxnet')}


def report_gap(res):
    c = GAP_LESSON
    out = ['## 2b. Lesson 2: one device against two, over seeds', '',
           f'`train` with the lesson\'s CPU settings ({c["num_train"]} '
           f'training and {c["num_test"]} test examples, {c["num_epochs"]} '
           f'epochs, batch {c["batch_size"]}, learning rate {c["lr"]}), on '
           f'one stand-in and on two, from the parameters that each seed '
           f'draws; the gap is the difference of the two test accuracies '
           f'(the lesson checks at most {TARGET_GAP:.0%}).', '',
           '| backend | seeds | gap: median | largest | accuracies (1 / 2 '
           'devices) |', '| --- | --- | --- | --- | --- |']
    for fw, r in res.items():
        if 'error' in r:
            out.append(f'| {fw} | no data | {r["error"][:80]} | — | — |')
            continue
        accs = ', '.join(f'{a:.1%}/{b:.1%}' for a, b in r['accs'])
        out.append(f'| {fw} | {len(r["gaps"])} | '
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
                      f'{fw} lesson 2, largest gap between one and two '
                      f'devices over {len(r["gaps"])} seeds: {worst:.2%} '
                      f'(target <= {TARGET_GAP:.0%})'))
    return lines
