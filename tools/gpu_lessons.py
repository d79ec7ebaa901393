"""Run lessons top to bottom, as a student would (`make test-gpu` runs the
English PyTorch lessons on the GPU), and keep what they showed: each
executed notebook and its figures under OUT, in the notebook's own path:

    OUT/notebooks/en/pytorch/multiple-gpus.ipynb         executed notebook
    OUT/notebooks/en/pytorch/multiple-gpus/cell07-1.png  a figure (.svg, .jpg)
    OUT/lessons.json, OUT/lessons.md                     seconds, results

A lesson fails when a cell raises, or when a checked cell (tagged
nbval-check-output) prints other lines than the committed notebook, after
the substitutions of tests/nbval_sanitize.cfg, as nbval compares them
(`make test`); the others still run. Only nbclient, nbformat and ipykernel
are needed (no Jupyter server, no JupyterLab); the kernel is this Python.

The lessons named with --alone run first, one at a time, with the GPU to
themselves (lesson 1 times copies beside products); the others then run
--jobs at a time, each kernel with OMP_NUM_THREADS = cores / jobs.

Usage::

    VENV/bin/python tools/gpu_lessons.py --out build/gpu \\
        [--jobs N] [--alone auto-parallelism] notebooks/en/pytorch/*.ipynb
"""
import argparse
import base64
import concurrent.futures
import configparser
import json
import os
import pathlib
import re
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMAGES = {'image/png': 'png', 'image/jpeg': 'jpg', 'image/svg+xml': 'svg'}


def sanitize(text, cfg=ROOT / 'tests' / 'nbval_sanitize.cfg'):
    config = configparser.ConfigParser(interpolation=None)
    config.read(cfg, encoding='utf-8')
    for section in config.sections():
        text = re.sub(config[section]['regex'],
                      config[section].get('replace', ''), text)
    return text


def checked_outputs(nb):
    """{cell index: what the checked cell printed, sanitized}."""
    return {i: sanitize(''.join(''.join(o.get('text', ''))
                                for o in c.get('outputs', [])
                                if o.get('output_type') == 'stream'
                                and o.get('name') == 'stdout'))
            for i, c in enumerate(nb.cells)
            if 'nbval-check-output' in c.get('metadata', {}).get('tags', [])}


def save_figures(nb, folder):
    """Write the images of the outputs into `folder`; their names."""
    names = []
    for i, cell in enumerate(nb.cells):
        k = 0
        for output in cell.get('outputs', []):
            for mime, ext in IMAGES.items():
                data = output.get('data', {}).get(mime)
                if data is None:
                    continue
                k += 1
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / f'cell{i:02d}-{k}.{ext}'
                if ext == 'svg':
                    path.write_text(''.join(data), encoding='utf-8')
                else:
                    path.write_bytes(base64.b64decode(''.join(data)))
                names.append(path.name)
    return names


def run_one(path, out, timeout, threads):
    """Execute the notebook `path` in a kernel of this Python; save it and
    its figures under `out`; a dict that says how it went."""
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    class ThisPythonKernel(KernelManager):
        """The kernel runs in this Python (the venv of make test-gpu),
        whatever kernel.json the user's Jupyter folders hold."""
        def format_kernel_cmd(self, extra_arguments=None):
            return [sys.executable, '-m', 'ipykernel_launcher', '-f',
                    self.connection_file] + list(extra_arguments or [])

    path = pathlib.Path(path).resolve()
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else \
        pathlib.Path(path.name)
    os.environ['MPLBACKEND'] = 'module://matplotlib_inline.backend_inline'
    if threads:
        os.environ['OMP_NUM_THREADS'] = str(threads)
    expected = checked_outputs(nbformat.read(path, 4))
    nb = nbformat.read(path, 4)
    for cell in nb.cells:
        if cell.cell_type == 'code':
            cell.outputs = []
    client = NotebookClient(nb, timeout=timeout, kernel_name='python3',
                            kernel_manager_class=ThisPythonKernel,
                            resources={'metadata': {'path': str(path.parent)}})
    start = time.perf_counter()
    error = None
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as e:
        error = str(e).strip().splitlines()[-1][:500] if str(e) else repr(e)
    except Exception as e:  # the kernel died, did not start, ...
        error = f'{type(e).__name__}: {e}'[:500]
    seconds = time.perf_counter() - start
    if error:
        error = re.sub(r'\x1b\[[0-9;]*m', '', error)  # the colours
    target = out / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    figures = save_figures(nb, target.with_suffix(''))
    got = checked_outputs(nb)
    differ = [i for i in expected if got.get(i) != expected[i]]
    if not error and differ:
        error = (f'{len(differ)} checked cell(s) printed other lines than '
                 f'the committed notebook: cells {differ}')
    return {'notebook': str(rel), 'seconds': round(seconds, 1),
            'figures': len(figures), 'checked_cells': len(expected),
            'differ': {i: {'expected': expected[i], 'got': got.get(i)}
                       for i in differ},
            'saved': str(target), 'error': error}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('notebooks', nargs='+')
    parser.add_argument('--out', default='build/gpu')
    parser.add_argument('--jobs', type=int, default=0,
                        help='lessons at a time (default: cores / 3)')
    parser.add_argument('--alone', action='append', default=[],
                        help='a lesson (file name without .ipynb) to run '
                             'first, by itself')
    parser.add_argument('--timeout', type=int, default=600,
                        help='seconds per cell')
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out).resolve()
    cores = os.cpu_count() or 1
    paths = [pathlib.Path(p) for p in args.notebooks]
    alone = [p for p in paths if p.stem in args.alone]
    rest = [p for p in paths if p not in alone]
    jobs = max(1, min(len(rest) or 1, args.jobs or cores // 3))
    threads = None if 'OMP_NUM_THREADS' in os.environ else \
        max(1, cores // jobs)
    print(f'gpu_lessons: {len(paths)} notebooks, {len(alone)} alone, then '
          f'{jobs} at a time ({cores} cores); saved under {out}',
          flush=True)
    results = []
    start = time.perf_counter()

    def report(r):
        status = 'FAILED: ' + r['error'] if r['error'] else 'ok'
        print(f"gpu_lessons: {r['notebook']}: {r['seconds']:.0f} s, "
              f"{r['figures']} figure(s), {r['checked_cells']} checked "
              f"cell(s): {status}", flush=True)
        for i, d in r['differ'].items():
            print(f'  cell {i}: expected {d["expected"]!r}\n'
                  f'          got      {d["got"]!r}', flush=True)
        results.append(r)

    # Each lesson in a process of its own (nbclient's event loop per
    # process): a kernel that dies takes no other lesson with it
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        for p in alone:
            report(pool.submit(run_one, p, out, args.timeout,
                               threads and cores).result())
        futures = [pool.submit(run_one, p, out, args.timeout, threads)
                   for p in rest]
        for f in concurrent.futures.as_completed(futures):
            report(f.result())
    total = time.perf_counter() - start
    results.sort(key=lambda r: r['notebook'])
    out.mkdir(parents=True, exist_ok=True)
    (out / 'lessons.json').write_text(json.dumps(
        {'seconds': round(total, 1), 'jobs': jobs, 'cores': cores,
         'lessons': results}, indent=1))
    lines = ['| lesson | seconds | figures | checked cells | result |',
             '| --- | ---: | ---: | ---: | --- |']
    lines += [f"| {r['notebook']} | {r['seconds']:.0f} | {r['figures']} | "
              f"{r['checked_cells']} | {r['error'] or 'ok'} |"
              for r in results]
    (out / 'lessons.md').write_text('\n'.join(lines) + '\n')
    failed = [r['notebook'] for r in results if r['error']]
    print(f'gpu_lessons: {len(results) - len(failed)} of {len(results)} '
          f'lessons passed in {total:.0f} s'
          + (f'; failed: {", ".join(failed)}' if failed else ''))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
