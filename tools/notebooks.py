"""Build the lesson notebooks from their plain-text sources.

Usage::

    python tools/notebooks.py build   # write notebooks/<lang>/<fw>/*.ipynb
                                      # and <lang>/<fw>/solutions/*.ipynb
    python tools/notebooks.py check   # fail if a committed notebook is stale

A source is ``notebooks/<lang>/<chapter>.md`` in the d2l book's markdown:

- a code cell is a fence opened by ```` ```{.python .input} ```` whose first
  line says which notebooks get it: ``#@tab pytorch``, ``#@tab mxnet`` or
  ``#@tab all``. A line ``#@check`` makes nbval compare the cell's output
  with the output block that follows it (``#@save`` marks a function that
  tools/library.py copies into d2lpar's backends: ``make lib``).
- an output block is a fence opened by ```` ```{.python .output} ````, with
  its own ``#@tab`` line; it is the expected output of the code cell of
  that framework just before it.
- prose between ``:begin_tab:`pytorch``` and ``:end_tab:`` goes only to
  that framework's notebook.

A ``#@check`` cell without an output block for each framework it goes to
is an error, as is an output block after a cell without ``#@check``.

Worked solutions of the exercises sit in the source after the lesson's
exercises, between a line ``:begin_solutions:`` and a line
``:end_solutions:`` (outside any tab): per exercise a ``### `` heading,
prose (the model answer) and code cells written as above. The lesson's
notebook leaves the whole block out (and so do its slides); it goes to
``notebooks/<lang>/<fw>/solutions/<chapter>.ipynb``, after a header
(links to the same solutions in the other languages and framework, and to
the lesson), a title made of the lesson's title and a word like
"Solutions", and the lesson's first code cell of that framework (its
imports), so that the solutions run on their own, under nbval like the
lessons. Their outputs are not compared (no ``#@check`` in the block: they
vary with the machine). A block not closed, a second block, a block
inside a tab or an ``:end_solutions:`` without its beginning is an error.

Each notebook opens with a header linking the same lesson in the other
languages and the other framework. Headings ``#``, ``##`` and ``###``
start markdown cells, marked for slideshows (cell metadata
``slideshow.slide_type``): the title and each ``##`` section a slide, each
``###`` a sub-slide, the header skipped; tools/slides.py and JupyterLab's
RISE read them (RISE also reads the notebook's ``rise`` settings). Only
the outputs of ``#@check`` cells are stored; nothing else that running a
notebook changes.
"""
import functools
import json
import pathlib
import re
import sys

from lesson_source import (  # tools/lesson_source.py: the parser
    HEADING, SourceError, parse)

ROOT = pathlib.Path(__file__).resolve().parent.parent / 'notebooks'
LANGS = {'en': 'English', 'fr': 'Français', 'tr': 'Türkçe', 'zh': '中文'}
FRAMEWORKS = {'pytorch': 'PyTorch', 'mxnet': 'MXNet'}
HEADER_WORDS = {'en': ('Language: ', 'Framework: '),
                'fr': ('Langue\u00a0: ', 'Framework\u00a0: '),
                'tr': ('Dil: ', 'Çerçeve: '),
                'zh': ('语言：', '框架：')}
# The second cell of every notebook: the line that installs d2lpar where
# PyTorch (or MXNet) is already installed, commented out as in the book.
INSTALL_WORDS = {
    'en': ('Where PyTorch is already installed (Colab, a cluster, conda),',
           'install d2lpar from this repository or from the wheel that',
           '`make dist` builds: it adds only what is missing and leaves the',
           'installed torch and numpy as they are.'),
    'fr': ('Là où PyTorch est déjà installé (Colab, un cluster, conda),',
           'installez d2lpar depuis ce dépôt ou depuis le paquet pip (wheel)',
           'que construit `make dist`\u00a0: pip n\'ajoute que ce qui manque',
           'et laisse intactes les versions de torch et de numpy déjà',
           'installées.'),
    'tr': ("PyTorch'un zaten kurulu olduğu yerlerde (Colab, bir küme, conda)",
           "d2lpar'ı bu depodan ya da `make dist` komutunun oluşturduğu",
           'wheel dosyasından kurun: yalnızca eksik olanı ekler, kurulu',
           "torch'a ve numpy'ye dokunmaz."),
    'zh': ('在已经装有 PyTorch 的环境中（Colab、计算集群、conda），',
           '可以从本仓库或 `make dist` 生成的 pip 安装包（wheel）'
           '安装 d2lpar：',
           '它只补装缺少的包，不改动已经安装的 torch 和 numpy。'),
}
# The title of a solutions notebook ("<lesson title>: Solutions") and the
# link back to the lesson, in each language.
SOLUTIONS_WORDS = {'en': (': Solutions', 'Lesson: '),
                   'fr': ('\u00a0: solutions', 'Leçon\u00a0: '),
                   'tr': (': Çözümler', 'Ders: '),
                   'zh': ('：习题解答', '本课：')}
# Where a slideshow (RISE in JupyterLab, `make slides`) starts a new slide:
# the title and every `## ` section; every `### ` is a sub-slide below it.
SLIDE_TYPES = {1: 'slide', 2: 'slide', 3: 'subslide'}
RISE = {'scroll': True, 'theme': 'white'}


def header(lang, fw, chapter, solutions_of=None):
    """The first cell of a notebook: links to the other languages and to
    the other framework; for the solutions of the lesson titled
    `solutions_of`, links to the other solutions and back to the lesson."""
    page = f'{chapter}.ipynb' if solutions_of is None else \
        f'solutions/{chapter}.ipynb'
    up = '../../' if solutions_of is None else '../../../'
    links = ' · '.join(
        f'**{name}**' if code == lang else f'[{name}]({up}{code}/{fw}/{page})'
        for code, name in LANGS.items())
    other = [f for f in FRAMEWORKS if f != fw][0]
    words = HEADER_WORDS[lang]
    text = (f'{words[0]}{links}  \n{words[1]}**{FRAMEWORKS[fw]}** · '
            f'[{FRAMEWORKS[other]}]({up[3:]}{other}/{page})')
    if solutions_of is not None:
        text += (f'  \n{SOLUTIONS_WORDS[lang][1]}[{solutions_of}]'
                 f'(../{chapter}.ipynb)')
    return text


def _header_cell(text):
    return {'cell_type': 'markdown',
            'metadata': {'tags': ['header'],
                         'slideshow': {'slide_type': 'skip'}},
            'source': text}


def install_cell(lang, fw, solutions=False):
    """The commented-out lines that install d2lpar, below the header: from
    the repository's root (relative to the notebook's folder) or from the
    wheel of `make dist`; with the mxnet extra in an MXNet notebook."""
    root = '../../../..' if solutions else '../../..'
    extra = '[mxnet]' if fw == 'mxnet' else ''
    wheel = f'd2lpar-{version()}-py3-none-any.whl'
    lines = [f'# {line}' for line in INSTALL_WORDS[lang]] + [
        f'# !pip install "{root}{extra}"',
        f'# !pip install "{wheel}{extra}"']
    return {'cell_type': 'code', 'execution_count': None,
            'metadata': {'tags': ['install'],
                         'slideshow': {'slide_type': 'skip'}},
            'outputs': [], 'source': '\n'.join(lines)}


@functools.cache
def version():
    """d2lpar's version, read from d2lpar/__init__.py (stdlib only)."""
    text = (ROOT.parent / 'd2lpar' / '__init__.py').read_text()
    return re.search(r"^__version__ = '([^']+)'", text, re.M).group(1)


def _cells(blocks, fw, cells):
    """Append to `cells` the cells of `blocks` that go to framework fw."""
    unanswered = None  # where a #@check cell waiting for its output is
    for kind, tab, body, at in blocks:
        if tab not in (None, 'all', fw):
            continue
        if unanswered and kind != 'output':
            break
        if kind == 'md':
            if cells[-1]['cell_type'] == 'markdown' and \
                    'header' not in cells[-1]['metadata'].get('tags', []) \
                    and not body.startswith('#'):
                cells[-1]['source'] += '\n\n' + body
            else:
                heading = HEADING.match(body)
                cells.append({'cell_type': 'markdown', 'metadata': (
                    {'slideshow': {'slide_type':
                                   SLIDE_TYPES[len(heading.group(1))]}}
                    if heading else {}), 'source': body})
        elif kind == 'input':
            check = '#@check' in body
            unanswered = at if check else None
            code = '\n'.join(line for line in body if line != '#@check')
            cells.append({'cell_type': 'code', 'execution_count': None,
                          'metadata': ({'tags': ['nbval-check-output']}
                                       if check else {}),
                          'outputs': [], 'source': code.strip('\n')})
        else:
            prev = cells[-1]
            if prev['cell_type'] != 'code' or \
                    'nbval-check-output' not in prev['metadata'].get(
                        'tags', []):
                raise SourceError(f'{at}: an output block must follow a '
                                  f'#@check code cell ({fw})')
            prev['outputs'] = [{'name': 'stdout', 'output_type': 'stream',
                                'text': '\n'.join(body) + '\n'}]
            prev['execution_count'] = 1  # nbval ignores outputs of unrun cells
            unanswered = None
    if unanswered:
        raise SourceError(f'{unanswered}: a #@check cell needs an output '
                          f'block for {fw}')
    return cells


def _finish(cells, lang, fw, chapter, solutions=False):
    for n, cell in enumerate(cells):
        cell['id'] = (f'{chapter}-solutions-{n:03d}' if solutions
                      else f'{chapter}-{n:03d}')
        for key in ('source', ):
            lines = cell[key].splitlines(keepends=True)
            cell[key] = lines
        for out in cell.get('outputs', []):
            out['text'] = out['text'].splitlines(keepends=True)
    about = {'language': lang, 'framework': fw,
             'source': f'{lang}/{chapter}.md'}
    if solutions:
        about['solutions'] = True
    return {'cells': cells,
            'metadata': {
                'kernelspec': {'display_name': 'Python 3 (ipykernel)',
                               'language': 'python', 'name': 'python3'},
                'language_info': {'name': 'python'},
                'd2lpar': about,
                # RISE, the slideshow in JupyterLab: long sections scroll,
                # and the theme loads no font from the network
                'rise': dict(RISE)},
            'nbformat': 4, 'nbformat_minor': 5}


def notebook(blocks, lang, fw, chapter):
    cells = [_header_cell(header(lang, fw, chapter)),
             install_cell(lang, fw)]
    return _finish(_cells(blocks, fw, cells), lang, fw, chapter)


def title_of(blocks):
    """The lesson's title: its first `# ` heading, without the `# `."""
    for kind, _, body, _ in blocks:
        if kind == 'md' and body.startswith('# '):
            return body.splitlines()[0][2:].strip()
    return ''


def solutions_notebook(lesson_blocks, blocks, lang, fw, chapter):
    """The solutions notebook: header, '<title>: Solutions', the lesson's
    first code cell of framework fw (without #@check), then `blocks`."""
    name = title_of(lesson_blocks)
    first = next(([(kind, tab, [line for line in body if line != '#@check'],
                    at)] for kind, tab, body, at in lesson_blocks
                  if kind == 'input' and tab in ('all', fw)), [])
    title = ('md', None, f'# {name}{SOLUTIONS_WORDS[lang][0]}', None)
    cells = [_header_cell(header(lang, fw, chapter, solutions_of=name)),
             install_cell(lang, fw, solutions=True)]
    _cells([title] + first + list(blocks), fw, cells)
    return _finish(cells, lang, fw, chapter, solutions=True)


def render(nb):
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + '\n'


def sources(root=ROOT):
    return sorted(p for lang in LANGS for p in (root / lang).glob('*.md'))


def targets(root=ROOT):
    """{path of a notebook: its text}, built from every source."""
    out = {}
    for src in sources(root):
        lang, chapter = src.parent.name, src.stem
        text = src.read_text(encoding='utf-8')
        where = src.relative_to(root.parent)
        blocks = parse(text, where)
        answers = parse(text, where, 'solutions')
        for fw in FRAMEWORKS:
            path = root / lang / fw / f'{chapter}.ipynb'
            out[path] = render(notebook(blocks, lang, fw, chapter))
            if answers:
                path = root / lang / fw / 'solutions' / f'{chapter}.ipynb'
                out[path] = render(solutions_notebook(blocks, answers, lang,
                                                      fw, chapter))
    return out


def main(argv, root=ROOT):
    """Run `build` or `check` on the notebooks under root."""
    command = argv[1] if len(argv) > 1 else 'build'
    built = targets(root)
    if command == 'build':
        for path, text in built.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text(encoding='utf-8') != text:
                path.write_text(text, encoding='utf-8')
                print(f'wrote {path.relative_to(root.parent)}')
        return 0
    if command == 'check':
        stale = [p for p, text in built.items()
                 if not p.exists() or p.read_text(encoding='utf-8') != text]
        known = set(built)
        extra = [p for pattern in ('*/*/*.ipynb', '*/*/solutions/*.ipynb')
                 for p in root.glob(pattern) if p not in known]
        for p in stale:
            print(f'stale: {p.relative_to(root.parent)} does not match its '
                  f'source; run `make notebooks` and commit the result')
        for p in extra:
            print(f'orphan: {p.relative_to(root.parent)} has no source')
        if not stale and not extra:
            print(f'{len(built)} notebooks match their sources')
        return 1 if stale or extra else 0
    print(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
