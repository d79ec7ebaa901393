"""Reveal.js slides of every lesson, for a classroom with no network.

Usage::

    python tools/slides.py                  # every lesson, language, framework
    python tools/slides.py --lang fr --framework pytorch --chapter distributed
    python tools/slides.py --out /tmp/slides

writes ``<out>/<lang>/<framework>/<chapter>.slides.html`` (``build/slides``
by default) and ``<out>/index.html``, which links them all.

A slideshow is the lesson's notebook, built from its source by
tools/notebooks.py, which marks the title and every ``##`` section as a
slide and every ``###`` as a sub-slide (below its section: the down arrow),
and skips the header of links; the worked solutions of the exercises
(the source's ``:begin_solutions:`` block) are not in that notebook, so
not on the slides either. nbconvert's slides exporter turns it into
reveal.js with the template in tools/slides_template/, which loads nothing
from the network: reveal.js (5.x, from the pinned ``sphinx-revealjs``,
installed without its Sphinx by ``make venv``) and MathJax 2 (from the
pinned ``jupyter-server-mathjax``) are copied into ``<out>/_static/`` and
the pictures into ``<out>/img/``, and every slideshow points at them with
relative paths. Copy the whole folder (to a USB stick, a shared drive) and
open a slideshow with a browser: no server and no network needed.

The slides show the code and the outputs that the lesson checks, not the
run itself; run the lesson in JupyterLab for live output (RISE,
docs/handbook.md).
"""
import argparse
import html
import importlib.util
import pathlib
import re
import shutil
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import notebooks as builder  # noqa: E402

OUT = HERE.parent / 'build' / 'slides'
TEMPLATES = HERE / 'slides_template'
REVEAL = '_static/reveal.js'
MATHJAX = '_static/mathjax'
INDEX_TITLE = 'd2lpar: slides'


def package_dir(name, sub):
    """The folder `sub` inside the installed package `name`, found without
    importing it (sphinx_revealjs is installed without Sphinx)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f'{name} is not installed: run `make venv` '
                         f'(its pin is in requirements-nodeps.txt or '
                         f'requirements/lock-py3.X.txt)')
    path = pathlib.Path(spec.submodule_search_locations[0]) / sub
    if not path.is_dir():
        raise SystemExit(f'{path} is missing: reinstall {name}')
    return path


def copy_assets(out):
    """Copy reveal.js, MathJax and the lessons' pictures under `out`."""
    reveal = package_dir('sphinx_revealjs', '_static/revealjs')
    target = out / REVEAL
    skip = shutil.ignore_patterns('*.map', '*.esm.js')
    shutil.copytree(reveal / 'dist', target / 'dist', ignore=skip,
                    dirs_exist_ok=True)
    shutil.copytree(reveal / 'plugin' / 'notes', target / 'plugin' / 'notes',
                    ignore=skip, dirs_exist_ok=True)
    shutil.copy2(reveal / 'LICENSE', target / 'LICENSE')
    mathjax = package_dir('jupyter_server_mathjax', 'static')
    # The slides use its HTML-CSS output (the package ships font data for
    # SVG but not the SVG output itself).
    shutil.copytree(mathjax, out / MATHJAX, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns('SVG'))
    shutil.copytree(builder.ROOT / 'img', out / 'img', dirs_exist_ok=True)


def lesson(lang, fw, chapter):
    """The lesson's notebook as tools/notebooks.py builds it (nbformat)."""
    import nbformat
    src = builder.ROOT / lang / f'{chapter}.md'
    blocks = builder.parse(src.read_text(encoding='utf-8'),
                           src.relative_to(builder.ROOT.parent))
    text = builder.render(builder.notebook(blocks, lang, fw, chapter))
    return nbformat.reads(text, as_version=4)


def title_of(nb):
    for cell in nb.cells:
        if cell.cell_type == 'markdown' and cell.source.startswith('# '):
            return cell.source.splitlines()[0][2:].strip()
    return ''


def exporter(lang):
    from nbconvert import SlidesExporter
    return SlidesExporter(
        template_name='d2lpar-reveal',
        extra_template_basedirs=[str(TEMPLATES)],
        exclude_input_prompt=True, exclude_output_prompt=True,
        reveal_url_prefix=f'../../{REVEAL}',
        mathjax_url=f'../../{MATHJAX}/MathJax.js',
        reveal_theme='white', reveal_transition='slide',
        reveal_number='c/t', language_code=lang)


def build(out=OUT, langs=None, frameworks=None, chapters=None, quiet=False):
    """Write the slideshows asked for (all by default) under `out`; return
    {path: lesson title}."""
    out = pathlib.Path(out)
    langs = langs or list(builder.LANGS)
    frameworks = frameworks or list(builder.FRAMEWORKS)
    chapters = chapters or sorted(p.stem for p in
                                  (builder.ROOT / 'en').glob('*.md'))
    copy_assets(out)
    written = {}
    for lang in langs:
        slides = exporter(lang)
        for fw in frameworks:
            for chapter in chapters:
                nb = lesson(lang, fw, chapter)
                body, _ = slides.from_notebook_node(
                    nb, resources={'metadata': {'name': title_of(nb)}})
                path = out / lang / fw / f'{chapter}.slides.html'
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(body, encoding='utf-8')
                written[path] = title_of(nb)
                if not quiet:
                    print(f'wrote {path}')
    write_index(out)
    return written


def write_index(out):
    """out/index.html: a link to every slideshow found under out."""
    rows = []
    for path in sorted(out.glob('*/*/*.slides.html')):
        lang, fw = path.parent.parent.name, path.parent.name
        rel = path.relative_to(out).as_posix()
        found = re.search(r'<title>(.*?) slides</title>',
                          path.read_text(encoding='utf-8'))
        name = html.unescape(found.group(1)) if found else \
            path.name[:-len('.slides.html')]
        rows.append(f'<li>{html.escape(builder.LANGS.get(lang, lang))} · '
                    f'{html.escape(builder.FRAMEWORKS.get(fw, fw))} · '
                    f'<a href="{html.escape(rel)}">{html.escape(name)}</a>'
                    f'</li>')
    (out / 'index.html').write_text(
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f'<title>{INDEX_TITLE}</title></head><body>\n'
        f'<h1>{INDEX_TITLE}</h1>\n<ul>\n' + '\n'.join(rows) +
        '\n</ul>\n</body></html>\n', encoding='utf-8')


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', default=str(OUT))
    p.add_argument('--lang', action='append', choices=list(builder.LANGS))
    p.add_argument('--framework', action='append',
                   choices=list(builder.FRAMEWORKS))
    p.add_argument('--chapter', action='append')
    args = p.parse_args(argv)
    written = build(args.out, args.lang, args.framework, args.chapter)
    print(f'{len(written)} slideshows in {args.out} (index.html lists them)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
