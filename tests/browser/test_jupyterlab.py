"""Open lesson notebooks in JupyterLab, in a real (headless) Chromium, run
every cell from the Run menu, and check what a student would see: every
code cell ran, no error, the language/framework links of the header lead
to notebooks that exist, and the first chart is drawn.

Which notebooks: `D2LPAR_BROWSER_NOTEBOOKS`, a comma-separated list of
`<lang>/<framework>/<chapter>` (e.g. `en/pytorch/auto-parallelism`), or
`all`. By default two quick ones, one per framework and language, so that
`make test` stays fast; `make test-browser` runs all of them.

A screenshot of each notebook, scrolled to its first chart, is saved as
`build/browser/<lang>-<framework>-<chapter>.png` (also when it fails).
"""
import json
import os
import pathlib
import re
import time
import urllib.error
import urllib.parse

import pytest

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # the fixtures skip, loudly, without playwright
    PlaywrightTimeout = Exception

from .conftest import IDLE

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / 'notebooks'
DEFAULT = ('en/pytorch/auto-parallelism', 'zh/mxnet/auto-parallelism')
RUN_TIMEOUT = float(os.environ.get('D2LPAR_BROWSER_TIMEOUT', '900'))
LOAD_TIMEOUT = 120_000  # ms: open the notebook and start its kernel


def all_notebooks():
    return sorted(p.relative_to(NOTEBOOKS).with_suffix('').as_posix()
                  for p in NOTEBOOKS.glob('*/*/*.ipynb'))


def selected_notebooks():
    value = os.environ.get('D2LPAR_BROWSER_NOTEBOOKS', '').strip()
    if not value:
        return list(DEFAULT)
    if value.lower() == 'all':
        return all_notebooks()
    names = []
    for name in value.split(','):
        name = name.strip().removesuffix('.ipynb')
        name = name.removeprefix('notebooks/')
        if name:
            names.append(name)
    return names


# One JS call that reads the state of the notebook in the page.
STATE_JS = r"""() => {
  const panel = document.querySelector(
      '.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const code = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const prompts = code.map(c => {
    const p = c.querySelector('.jp-InputArea-prompt, .jp-InputPrompt');
    return p ? p.textContent.trim() : '';
  });
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const stderr = [...panel.querySelectorAll(
      '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
  )].map(e => e.innerText);
  return {
    cells: panel.querySelectorAll('.jp-Notebook .jp-Cell').length,
    prompts: prompts,
    status: ind ? ind.getAttribute('data-status') : null,
    stderr: stderr,
  };
}"""

FIRST_CHART_JS = r"""() => {
  const panel = document.querySelector(
      '.jp-NotebookPanel:not(.lm-mod-hidden)');
  const el = panel.querySelector(
      '.jp-OutputArea-output img, .jp-OutputArea-output svg');
  if (!el) return null;
  el.scrollIntoView({block: 'center'});
  const r = el.getBoundingClientRect();
  return {tag: el.tagName.toLowerCase(), width: r.width, height: r.height,
          natural: el.tagName.toLowerCase() === 'img'
                   ? [el.naturalWidth, el.naturalHeight] : null,
          complete: el.tagName.toLowerCase() === 'img' ? el.complete : true};
}"""

HEADER_LINKS_JS = r"""() => {
  const panel = document.querySelector(
      '.jp-NotebookPanel:not(.lm-mod-hidden)');
  const cell = panel.querySelector('.jp-Notebook .jp-Cell');
  if (!cell || !cell.classList.contains('jp-MarkdownCell')) return null;
  return [...cell.querySelectorAll('.jp-RenderedMarkdown a')].map(
      a => ({text: a.textContent, href: a.getAttribute('href')}));
}"""

EXECUTED = re.compile(r'^\[\d+\]:?$')
# An exception's last line ("ValueError: ...", "KeyboardInterrupt"), as
# opposed to a warning ("/path/file.py:12: UserWarning: ...").
ERROR_LINE = re.compile(
    r'^\s*([A-Za-z_][\w.]*)?(Error|Exception|Interrupt|Exit)\b(:|$)',
    re.MULTILINE)


def is_error(text):
    return 'Traceback' in text or bool(ERROR_LINE.search(text))


def finished(state):
    """All code cells ran and the kernel is idle, or an error stopped the
    run (then the cells below it will never run)."""
    if not state or state['status'] != 'idle':
        return False
    if any(p == '[*]:' or p == '[*]' for p in state['prompts']):
        return False
    if all(EXECUTED.match(p) for p in state['prompts']):
        return True
    return any(is_error(t) for t in state['stderr'])


def raw_header_links(nb_path):
    cell = json.loads(nb_path.read_text(encoding='utf-8'))['cells'][0]
    assert cell['cell_type'] == 'markdown', \
        f'{nb_path}: the first cell is not the markdown header'
    return re.findall(r'\]\(([^)\s]+)\)', ''.join(cell['source']))


def link_target(href, server, nb_dir):
    """The repository-relative path a header link opens in JupyterLab.
    JupyterLab rewrites a relative link to `<server>/files/<path>?...`."""
    parsed = urllib.parse.urlsplit(href)
    if parsed.scheme in ('http', 'https'):
        assert href.startswith(server.url + '/'), \
            f'header link {href!r} leaves the JupyterLab server'
        path = urllib.parse.unquote(parsed.path)
        for prefix in ('/files/', '/lab/tree/', '/tree/'):
            if path.startswith(prefix):
                return path[len(prefix):]
        raise AssertionError(f'header link {href!r}: unexpected URL')
    resolved = (nb_dir / urllib.parse.unquote(parsed.path)).resolve()
    return resolved.relative_to(ROOT).as_posix()


def run_all_cells(page):
    """Run > Run All Cells, from JupyterLab's menu bar."""
    page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell').first \
        .click()  # make the notebook the current widget
    page.get_by_role('menuitem', name='Run', exact=True).click()
    item = page.locator('.lm-Menu-item:not(.lm-mod-disabled)',
                        has_text=re.compile(r'^Run All Cells'))
    item.first.click()


def wait_until_finished(page, nb):
    deadline = time.monotonic() + RUN_TIMEOUT
    state = None
    while time.monotonic() < deadline:
        state = page.evaluate(STATE_JS)
        if finished(state):
            return state
        page.wait_for_timeout(500)
    pytest.fail(f'{nb}: not finished after {RUN_TIMEOUT:.0f} s '
                f'(D2LPAR_BROWSER_TIMEOUT); last state: kernel '
                f'{state and state["status"]}, prompts '
                f'{state and state["prompts"]}')


@pytest.mark.parametrize('nb', selected_notebooks())
def test_notebook_runs_in_jupyterlab(nb, lab_server, browser,
                                     screenshot_dir):
    nb_path = NOTEBOOKS / f'{nb}.ipynb'
    assert nb_path.exists(), \
        f'D2LPAR_BROWSER_NOTEBOOKS names {nb!r}, but {nb_path} does not ' \
        f'exist; choose among: {", ".join(all_notebooks())} (or "all")'
    cells = json.loads(nb_path.read_text(encoding='utf-8'))['cells']
    n_code = sum(c['cell_type'] == 'code' for c in cells)
    rel = nb_path.relative_to(ROOT).as_posix()
    shot = screenshot_dir / (nb.replace('/', '-') + '.png')

    page = browser.new_page()
    page.set_default_timeout(60_000)
    try:
        lab_server.open(page, rel)
        page.wait_for_function(
            f'() => (document.querySelectorAll(".jp-NotebookPanel:not('
            f'.lm-mod-hidden) .jp-Notebook .jp-Cell").length === '
            f'{len(cells)})', timeout=LOAD_TIMEOUT)
        page.wait_for_selector(IDLE, timeout=LOAD_TIMEOUT)

        # The header links, before running anything. Markdown is rendered
        # after the cells are attached: wait for the header's links.
        raw = raw_header_links(nb_path)
        assert raw, f'{nb}: the header has no links'
        try:
            page.wait_for_function(
                f'() => {{ const l = ({HEADER_LINKS_JS})(); '
                f'return l !== null && l.length >= {len(raw)}; }}',
                timeout=30_000)
        except PlaywrightTimeout:
            pass  # the assertions below say what is missing
        links = page.evaluate(HEADER_LINKS_JS)
        assert links is not None, f'{nb}: the first cell is not markdown'
        assert len(links) == len(raw), \
            f'{nb}: the header shows {len(links)} links, its source has ' \
            f'{len(raw)}: {links}'
        expected = sorted(
            (nb_path.parent / h).resolve().relative_to(ROOT).as_posix()
            for h in raw)
        targets = sorted(link_target(link['href'], lab_server,
                                     nb_path.parent) for link in links)
        assert targets == expected, \
            f'{nb}: the header links open {targets}, not {expected}'
        for target, link in zip(targets, links):
            assert (ROOT / target).is_file(), \
                f'{nb}: header link {link["text"]!r} -> {target}, which ' \
                f'does not exist'
            assert target.endswith('.ipynb'), \
                f'{nb}: header link {link["text"]!r} -> {target}, not a ' \
                f'notebook'
            status, model = lab_server.api(
                'GET', '/api/contents/' + urllib.parse.quote(target) +
                '?content=0')
            assert status == 200 and model['type'] == 'notebook', \
                f'{nb}: JupyterLab cannot open {target}'

        started = time.monotonic()
        run_all_cells(page)
        state = wait_until_finished(page, nb)
        seconds = time.monotonic() - started

        errors = [t for t in state['stderr'] if is_error(t)]
        assert not errors, \
            f'{nb}: error output after Run All Cells:\n' + \
            '\n---\n'.join(t[-3000:] for t in errors)
        assert len(state['prompts']) == n_code, \
            f'{nb}: the page shows {len(state["prompts"])} code cells, ' \
            f'the notebook has {n_code}'
        not_run = [i for i, p in enumerate(state['prompts'])
                   if not EXECUTED.match(p)]
        assert not not_run, \
            f'{nb}: code cells {not_run} (0-based, code cells only) have ' \
            f'no execution count: {state["prompts"]}'

        page.wait_for_timeout(500)  # let the last images decode
        chart = page.evaluate(FIRST_CHART_JS)
        assert chart is not None, f'{nb}: no chart (img/svg) in any output'
        assert chart['width'] > 0 and chart['height'] > 0, \
            f'{nb}: the first chart has no size: {chart}'
        if chart['natural'] is not None:
            assert chart['complete'] and min(chart['natural']) > 0, \
                f'{nb}: the first chart image did not load: {chart}'
        assert 'Saving file at' not in lab_server.log(), \
            f'{nb}: JupyterLab saved a notebook into the repository'
        print(f'{nb}: {n_code} code cells ran in {seconds:.1f} s; first '
              f'chart {chart["tag"]} {chart["width"]:.0f}x'
              f'{chart["height"]:.0f}; screenshot {shot}')
    finally:
        try:
            page.screenshot(path=str(shot))
        finally:
            page.close()
            lab_server.shutdown_kernels()
