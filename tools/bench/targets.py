"""The targets: each figure that matters against what it should reach,
as PASS, MISS or NO DATA."""

from tools.bench.settings import (
    TARGET_BOTH, TARGET_CONCISE, TARGET_COPY, TARGET_FRACTION,
    TARGET_NBVAL_S, TARGET_NOTEBOOK_S, TARGET_SCALING)
from tools.bench.sections import best_fraction, ratio
from tools.bench.report import fmt_ratio


def verdict(ok):
    return 'NO DATA' if ok is None else ('PASS' if ok else 'MISS')


def targets(results):
    lines = []
    for fw, r in (results.get('standins') or {}).items():
        if 'error' in r:
            lines.append((verdict(None), f'{fw} stand-ins: no data'))
            continue
        both = r['lesson1']['both_over_sum']
        copy = r['lesson1']['copy_over_sum']
        two = r['lesson3']['two_over_one']
        lines += [
            (verdict(both <= TARGET_BOTH), f'{fw} lesson 1, two stand-ins '
             f'at once / sum of each alone: {both:.2f} (target <= '
             f'{TARGET_BOTH})'),
            (verdict(copy <= TARGET_COPY), f'{fw} lesson 1, compute and '
             f'copy / sum: {copy:.2f} (target <= {TARGET_COPY})'),
            (verdict(two >= TARGET_CONCISE), f'{fw} lesson 3, 2 stand-ins / '
             f'1: {fmt_ratio(two, 3)} (target >= {TARGET_CONCISE}x)')]
    ar = results.get('allreduce')
    if ar:
        for backend in ('torch', 'mxnet'):
            frac, name, own = best_fraction(ar, backend)
            lines.append(
                (verdict(None if frac is None else frac >= TARGET_FRACTION),
                 f'best d2lpar.{backend} allreduce at 64 MB, 4 devices: '
                 + (f'{frac:.0%} of the one-host limit ({name}; {own:.0%} '
                    f'of the limit set by {backend}\'s own copy bandwidth)'
                    if frac is not None else 'not measured')
                 + f' (target >= {TARGET_FRACTION:.0%})'))
    tr = results.get('training')
    if tr:
        runs = tr['runs']
        for backend in ('torch', 'mxnet'):
            s = ratio(runs, f'{backend}:d2l.train/2', f'{backend}:d2l.train/1')
            lines.append((verdict(None if s is None else s >= TARGET_SCALING),
                          f'{backend} d2l.train 2 devices / 1 device: '
                          f'{fmt_ratio(s, 3)} (target >= {TARGET_SCALING}x)'))
        for backend in ('torch', 'mxnet'):
            c = ratio(runs, f'{backend}:d2l.train/1', f'{backend}:chapter/1')
            spread = max((runs[k]['spread'] for k in
                          (f'{backend}:d2l.train/1', f'{backend}:chapter/1')
                          if runs.get(k)), default=0)
            noise = c is not None and c < 1.0 and 1.0 - c <= spread
            note = (f'run-to-run spread up to {spread:.0%}'
                    + (', so within noise' if noise else '')
                    if tr['config']['reps'] > 1 else 'one run each')
            lines.append((verdict(None if c is None else c >= 1.0),
                          f'{backend} d2l.train / chapter\'s loop, 1 device: '
                          f'{fmt_ratio(c, 3)} (target >= 1.00x; {note})'))
        for backend in ('torch', 'mxnet'):
            c = ratio(runs, f'{backend}:train_concise',
                      f'{backend}:train_ch13')
            lines.append((verdict(None if c is None else c >= 1.0),
                          f'{backend} train_concise / d2l.train_ch13, 1 '
                          f'device: {fmt_ratio(c, 3)} (target >= 1.00x)'))
    nb = results.get('notebooks')
    if nb:
        timed_rows = [r for r in nb['rows'] if r['seconds'] is not None]
        worst = max(timed_rows, key=lambda r: r['seconds'], default=None)
        slow = [r for r in timed_rows if r['seconds'] >= TARGET_NOTEBOOK_S]
        errors = [r for r in nb['rows'] if r['error']]
        missing = len(nb['rows']) - len(timed_rows)
        partial = f', {missing} not run' if missing else ''
        if worst:
            lines.append((verdict(None if missing and not slow
                                  else not slow and not errors),
                          f'every notebook under {TARGET_NOTEBOOK_S} s: '
                          f'slowest {worst["notebook"]} '
                          f'{worst["seconds"]:.0f} s'
                          + (f', {len(slow)} at or over' if slow else '')
                          + (f', {len(errors)} failed' if errors else '')
                          + partial
                          + (' (includes estimates)' if any(
                              not r['measured'] for r in slow) else '')))
        total = nb.get('total_seconds')
        if total is not None:
            lines.append((verdict(total < TARGET_NBVAL_S if not missing
                                  or total >= TARGET_NBVAL_S else None),
                          f'whole nbval run (estimated as the sum of the '
                          f'notebook times, serial): {total / 60:.1f} min'
                          + partial + f' (target < {TARGET_NBVAL_S // 60} '
                          f'min)'))
    return lines
