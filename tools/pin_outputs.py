"""Run lessons and write what their ``#@check`` cells print into the
output blocks of their sources (the text nbval compares).

Usage::

    python tools/pin_outputs.py notebooks/fr/multiple-gpus.md [...]
    python tools/pin_outputs.py --framework mxnet notebooks/zh/*.md

For each source it builds the notebooks and the library (the #@save code
of the English lessons in d2lpar's backends, as `make lib` does), runs
each framework's notebook
top to bottom in a fresh kernel (as nbval does), and replaces the output
block after every ``#@check`` cell with the cell's printed text. A block
shared by both frameworks (``#@tab all``) stays shared when both print
the same, and is split in two otherwise. It rebuilds the notebooks
afterwards; read the diff before committing: the outputs are what a
student will be compared with.
"""
import argparse
import os
import pathlib
import sys

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import lesson_source  # noqa: E402  (tools/lesson_source.py)
import library  # noqa: E402  (tools/library.py)
import notebooks  # noqa: E402  (tools/notebooks.py)


def printed(path, timeout=900):
    """Run the notebook at `path`; the stdout of each #@check cell."""
    nb = nbformat.read(str(path), as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name='python3',
                   resources={'metadata': {'path': str(path.parent)}}
                   ).execute()
    out = []
    for cell in nb.cells:
        if 'nbval-check-output' in cell.metadata.get('tags', []):
            out.append(''.join(o.get('text', '') for o in cell.outputs
                               if o.get('name') == 'stdout').rstrip('\n'))
    return out


def pin(text, new):
    """`text` of a source with the output blocks replaced from `new`:
    {framework: [printed text of each #@check cell, in order]}."""
    lines = text.splitlines()
    result, seen, owner = [], {fw: -1 for fw in notebooks.FRAMEWORKS}, {}
    i = 0
    while i < len(lines):
        m = lesson_source.FENCE.match(lines[i])
        if not m:
            result.append(lines[i])
            i += 1
            continue
        end = lines.index('```', i + 1)
        tab = lesson_source.TAB.match(lines[i + 1]).group(1)
        fws = list(notebooks.FRAMEWORKS) if tab == 'all' else [tab]
        body = lines[i + 2:end]
        if m.group(1) == 'input':
            owner = {}
            if '#@check' in body:
                for fw in fws:
                    seen[fw] += 1
                    owner[fw] = seen[fw]
            result.extend(lines[i:end + 1])
        else:
            texts = {fw: (new[fw][owner[fw]] if fw in new
                          else '\n'.join(body)) for fw in fws}
            if len(set(texts.values())) == 1:
                groups = [(tab, texts[fws[0]])]
            else:
                groups = list(texts.items())
            for n, (t, body_text) in enumerate(groups):
                if n:
                    result.append('')
                result.extend(['```{.python .output}', f'#@tab {t}',
                               *body_text.splitlines(), '```'])
        i = end + 1
    return '\n'.join(result) + '\n'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('sources', nargs='+', type=pathlib.Path)
    parser.add_argument('--framework', choices=notebooks.FRAMEWORKS,
                        action='append')
    args = parser.parse_args(argv)
    notebooks.main(['', 'build'])
    library.main(['', 'build'])  # the notebooks run the lessons' #@save code
    for src in args.sources:
        src = src.resolve()
        chapter = src.stem
        new = {}
        for fw in args.framework or notebooks.FRAMEWORKS:
            nb = src.parent / fw / f'{chapter}.ipynb'
            print(f'running {nb.relative_to(notebooks.ROOT.parent)}',
                  flush=True)
            new[fw] = printed(nb)
        src.write_text(pin(src.read_text(encoding='utf-8'), new),
                       encoding='utf-8')
    notebooks.main(['', 'build'])
    return 0


if __name__ == '__main__':
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    sys.exit(main())
