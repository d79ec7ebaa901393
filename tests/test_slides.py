"""`make slides`: one lesson's reveal.js slideshow, built into a temporary
folder, has a slide per section of the lesson and a sub-slide per
subsection, and loads every script, style sheet and picture from files
beside it, none from the network (a classroom may have none); RISE, the
live slideshow, is installed and enabled in JupyterLab."""
import html.parser
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import slides  # noqa: E402

LANG, FW = 'en', 'pytorch'
# Sections (##), a subsection (###), a picture and formulas
CHAPTER = 'auto-parallelism'
REMOTE = re.compile(r'^\s*(https?:)?//', re.I)
CSS_URL = re.compile(r'''@import\s+(?:url\()?\s*['"]?([^'")\s;]+)|'''
                     r'''url\(\s*['"]?([^'")\s]+)''')


class Slides(html.parser.HTMLParser):
    """The nested <section>s of the slideshow with the headings in each,
    and every address a script, a style sheet or a picture loads."""

    def __init__(self):
        super().__init__()
        self.stack = []        # open sections: [headings, children]
        self.top = []          # top-level sections
        self.heading = None    # text of the heading being read
        self.in_anchor = False
        self.loads = []        # (tag, address)
        self.inline = []       # text of <style> and inline <script>
        self.raw = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == 'section':
            node = {'headings': [], 'children': []}
            (self.stack[-1]['children'] if self.stack
             else self.top).append(node)
            self.stack.append(node)
        elif tag in ('h1', 'h2', 'h3') and self.stack:
            self.heading = [tag, '']
        elif tag == 'a' and self.heading:
            self.in_anchor = 'anchor-link' in (a.get('class') or '')
        elif tag == 'script':
            if a.get('src'):
                self.loads.append(('script', a['src']))
            else:
                self.raw = []
        elif tag == 'link' and a.get('href'):
            self.loads.append(('link', a['href']))
        elif tag == 'img' and a.get('src'):
            self.loads.append(('img', a['src']))
        elif tag == 'style':
            self.raw = []

    def handle_endtag(self, tag):
        if tag == 'section':
            self.stack.pop()
        elif tag in ('h1', 'h2', 'h3') and self.heading:
            self.stack[-1]['headings'].append(
                (self.heading[0], ' '.join(self.heading[1].split())))
            self.heading = None
        elif tag == 'a':
            self.in_anchor = False
        elif tag in ('script', 'style') and self.raw is not None:
            self.inline.append(''.join(self.raw))
            self.raw = None

    def handle_data(self, data):
        if self.heading and not self.in_anchor:
            self.heading[1] += data
        if self.raw is not None:
            self.raw.append(data)


def lesson_outline(lang, chapter):
    """[(section title, [subsection titles])] of a lesson source, the title
    of the lesson first; headings inside code fences and in the solutions
    block (:begin_solutions: to :end_solutions:) do not count."""
    outline, fence = [], False
    text = (ROOT / 'notebooks' / lang / f'{chapter}.md').read_text('utf-8')
    for line in lesson_lines(text):
        if line.startswith('```'):
            fence = not fence
        elif not fence and re.match(r'#{1,2} ', line):
            outline.append((line.split(' ', 1)[1].strip(), []))
        elif not fence and line.startswith('### '):
            outline[-1][1].append(line[4:].strip())
    return outline


def lesson_lines(text, solutions=False):
    """The lines of a source outside its solutions block (or, with
    solutions=True, inside it)."""
    inside, kept = False, []
    for line in text.splitlines():
        if line.strip() in (':begin_solutions:', ':end_solutions:'):
            inside = line.strip() == ':begin_solutions:'
        elif inside == solutions:
            kept.append(line)
    return kept


def headings(slides):
    """Every heading of the slides and of the slides below them."""
    for slide in slides:
        yield from slide['headings']
        yield from headings(slide['children'])


def plain(title):
    """A markdown heading as the browser shows its text."""
    return ' '.join(re.sub(r'[*_`]', '', title).split())


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp('slides')
    written = slides.build(out, [LANG], [FW], [CHAPTER], quiet=True)
    path = out / LANG / FW / f'{CHAPTER}.slides.html'
    assert list(written) == [path]
    parser = Slides()
    parser.feed(path.read_text(encoding='utf-8'))
    return out, path, parser


def test_the_slideshow_is_written_where_make_slides_puts_it(built):
    out, path, _ = built
    assert path.is_file() and path.stat().st_size > 10_000
    assert f'{LANG}/{FW}/{CHAPTER}.slides.html' in \
        (out / 'index.html').read_text(encoding='utf-8')


def test_a_slide_per_section_and_a_sub_slide_per_subsection(built):
    _, _, parser = built
    outline = lesson_outline(LANG, CHAPTER)
    assert len(outline) > 3 and any(subs for _, subs in outline)
    assert len(parser.top) == len(outline), \
        (f'{len(parser.top)} slides for {len(outline)} sections (the title '
         f'and each ##): a section is split or two are merged')
    for (title, subs), slide in zip(outline, parser.top):
        assert not slide['headings'], 'content outside a sub-slide'
        kids = slide['children']
        assert len(kids) == 1 + len(subs), \
            f'{title!r}: {len(kids) - 1} sub-slides for {len(subs)} ###'
        assert kids[0]['headings'][0][1] == plain(title), kids[0]['headings']
        for sub, kid in zip(subs, kids[1:]):
            assert kid['headings'][0] == ('h3', plain(sub))
        for kid in kids:   # no heading of another section inside
            assert [h for h in kid['headings'][1:]
                    if h[0] in ('h1', 'h2', 'h3')] == []


def test_the_solutions_are_not_on_the_slides(built):
    """The worked solutions of the exercises (tools/notebooks.py) go to
    their own notebook, not to the lesson's slides."""
    _, path, parser = built
    text = (ROOT / 'notebooks' / LANG / f'{CHAPTER}.md').read_text('utf-8')
    answers = [plain(line[4:]) for line in lesson_lines(text, True)
               if line.startswith('### ')]
    assert answers, f'{CHAPTER} has no solutions to leave out'
    shown = {title for _, title in headings(parser.top)}
    assert shown and not shown & set(answers), shown & set(answers)
    assert 'solutions:' not in path.read_text(encoding='utf-8')


def test_nothing_is_loaded_from_the_network(built):
    """Every script, style sheet, picture and CSS import is a file beside
    the slides (copied there by make slides), or inline data."""
    _, path, parser = built
    assert {tag for tag, _ in parser.loads} >= {'script', 'link', 'img'}
    refs = [(path, tag, src) for tag, src in parser.loads]
    for text in parser.inline:
        assert not re.search(r'''import\s[^;]*?['"](https?:)?//''', text), \
            'an inline script imports a module from the network'
        refs += [(path, 'css', m.group(1) or m.group(2))
                 for m in CSS_URL.finditer(text)]
    seen = set()
    while refs:
        page, tag, src = refs.pop()
        assert not REMOTE.match(src), \
            f'{page.name}: <{tag}> loads {src} from the network'
        if src.startswith(('data:', '#', 'about:')):
            continue
        target = (page.parent / src.split('#')[0].split('?')[0]).resolve()
        assert target.is_file(), f'{page.name}: {src} is missing'
        if target.suffix == '.css' and target not in seen:
            seen.add(target)  # the style sheets' own imports and fonts
            refs += [(target, 'css', m.group(1) or m.group(2)) for m in
                     CSS_URL.finditer(target.read_text(encoding='utf-8'))]
    assert seen, 'no local style sheet (reveal.css, the theme)'


def test_rise_is_installed_and_enabled_in_jupyterlab():
    """The live slideshow: jupyterlab-rise (requirements/lock-py3.X.txt) is
    installed as a prebuilt extension of the venv's JupyterLab, and no
    labconfig disables it (what `jupyter labextension list` reports as
    enabled, read from the files: that command takes 10 s here)."""
    from jupyter_core.paths import jupyter_config_path, jupyter_path
    found = [pathlib.Path(d) / 'jupyterlab-rise' / 'package.json'
             for d in jupyter_path('labextensions')]
    found = [p for p in found if p.is_file()]
    assert found, 'jupyterlab-rise is not installed: run `make venv`'
    assert json.loads(found[0].read_text('utf-8'))['version'] == '0.43.1'
    for d in jupyter_config_path():
        page = pathlib.Path(d) / 'labconfig' / 'page_config.json'
        if page.is_file():
            disabled = json.loads(page.read_text('utf-8')).get(
                'disabledExtensions', {})
            assert not any(name.startswith('jupyterlab-rise') and
                           (disabled.get(name, True)
                            if isinstance(disabled, dict) else True)
                           for name in disabled), f'{page} disables RISE'
    server = [pathlib.Path(d) / 'jupyter_server_config.d' /
              'jupyterlab_rise.json' for d in jupyter_config_path()]
    server = [p for p in server if p.is_file()]
    assert server and json.loads(server[0].read_text('utf-8'))[
        'ServerApp']['jpserver_extensions']['jupyterlab_rise'] is True
