"""A Chinese lesson in a Chinese JupyterLab, in headless Chromium.

The server gets its language the way `make lab LAB_LANG=zh` gives it
(tools/lab_language.py: a default setting read through
JUPYTER_CONFIG_PATH, here in the test's own folder), and the page must
show JupyterLab's menus in Chinese. Then the lesson's first cell (the
import of d2lpar) runs, and a cell added to the page (not saved: autosave
is off) draws a training chart through d2lpar's `Animator` with a Chinese
axis label and legend: the chart must be shown, and the kernel must have
written no "Glyph ... missing from current font" (nor "findfont") warning
into the cell's output, which is what matplotlib says when it draws a
character as an empty box.

Kept short for `make test`: one server, one kernel, two cells.
Screenshot: build/browser/zh-jupyterlab.png.
"""

import pytest

from .conftest import IDLE, serve_lab

NOTEBOOK = 'notebooks/zh/pytorch/auto-parallelism.ipynb'
LOAD_TIMEOUT = 120_000  # ms
RUN_TIMEOUT = 180_000  # ms: import torch and d2lpar, draw one chart
MARK = '# d2lpar: 图例中的中文'
CHART_CELL = MARK + '''
animator = d2l.Animator('轮次', '准确率', legend=['训练准确率', '测试准确率'],
                        xlim=[1, 3], ylim=[0, 1])
for epoch in (1, 2, 3):
    animator.add(epoch, (0.5 + 0.1 * epoch, 0.4 + 0.1 * epoch))
'''


@pytest.fixture(scope='module')
def lab_server_zh(request, chromium_path, sync_playwright):
    return serve_lab(request, 'd2lpar-lab-zh-', language='zh')


MENU_JS = r"""() => [...document.querySelectorAll(
    '#jp-menu-panel .lm-MenuBar-itemLabel')].map(e => e.textContent)"""

CELL_JS = r"""(mark) => {
  const panel = document.querySelector(
      '.jp-NotebookPanel:not(.lm-mod-hidden)');
  const cell = [...panel.querySelectorAll('.jp-Notebook .jp-CodeCell')]
      .find(c => c.querySelector('.jp-InputArea').innerText.includes(mark));
  if (!cell) return null;
  const prompt = cell.querySelector('.jp-InputArea-prompt');
  const img = cell.querySelector('.jp-OutputArea-output img');
  return {
    prompt: prompt ? prompt.textContent.trim() : '',
    stderr: [...cell.querySelectorAll(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    )].map(e => e.innerText),
    img: img ? {complete: img.complete, width: img.naturalWidth,
                height: img.naturalHeight} : null,
  };
}"""


ACTIVE_JS = r"""(text) => {
  const cell = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)'
      + ' .jp-Notebook .jp-Cell.jp-mod-active');
  return !!cell && cell.querySelector('.jp-InputArea').innerText
      .includes(text);
}"""


def _run(page, run, text):
    """Make the first code cell that contains `text` the active cell (a
    click on its prompt, repeated until JupyterLab shows it active), then
    press `run`, the toolbar's run button."""
    cell = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) '
                        '.jp-Notebook .jp-CodeCell').filter(
        has_text=text).first
    for _attempt in range(5):
        cell.locator('.jp-InputArea-prompt').click()
        try:
            page.wait_for_function(ACTIVE_JS, arg=text, timeout=5_000)
            break
        except Exception:  # playwright's TimeoutError: click again
            continue
    else:
        raise AssertionError(f'the cell with {text!r} never became active')
    run.click()


def test_chinese_lesson_in_chinese_jupyterlab(lab_server_zh, browser,
                                             screenshot_dir):
    server = lab_server_zh
    page = browser.new_page()
    page.set_default_timeout(60_000)
    try:
        server.open(page, NOTEBOOK, 'd2lpar-zh-')
        page.wait_for_selector(IDLE, timeout=LOAD_TIMEOUT)

        # (a) JupyterLab's own menus are in Chinese.
        page.wait_for_function(
            f'() => ({MENU_JS})().length >= 5', timeout=LOAD_TIMEOUT)
        labels = page.evaluate(MENU_JS)
        assert '文件' in labels and 'File' not in labels, \
            f'the menu bar is not in Chinese: {labels}'
        assert page.evaluate('document.documentElement.lang') == 'zh-CN'

        # The lesson's import cell (the first code cell that imports
        # d2lpar: the one above it only shows the install line), then a
        # chart with a Chinese legend.
        first = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) '
                             '.jp-Notebook .jp-CodeCell').filter(
            has_text='from d2lpar import').first
        first.locator('.jp-InputArea-prompt').click()
        page.keyboard.press('Escape')
        page.keyboard.press('b')  # a new cell below it, in command mode
        page.keyboard.press('Enter')  # edit it
        page.keyboard.insert_text(CHART_CELL)  # no auto-indent
        page.keyboard.press('Escape')
        # The toolbar's "run this cell and select the next" button (the
        # Shift+Enter key did not run anything here in headless Chromium)
        run = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Toolbar '
                           '[data-command="notebook:run-cell-and-select-next"]')
        # Each cell is run once it is the active cell, and the chart only
        # after the import has run: a click on a prompt can come before
        # JupyterLab has taken the previous key press, and the chart then
        # ran first, without d2l (seen once in CI)
        _run(page, run, 'from d2lpar import')
        page.wait_for_function(
            f'() => {{ const c = ({CELL_JS})("from d2lpar import"); '
            f'return c && /^\\[\\d+\\]/.test(c.prompt); }}',
            timeout=RUN_TIMEOUT)
        _run(page, run, MARK)
        page.wait_for_function(
            f'() => {{ const c = ({CELL_JS})({MARK!r}); return c && '
            f'(/^\\[\\d+\\]/.test(c.prompt) || c.stderr.length); }}',
            timeout=RUN_TIMEOUT)
        page.wait_for_function(  # the image arrives with the prompt or so
            f'() => {{ const c = ({CELL_JS})({MARK!r}); return c.img && '
            f'c.img.complete || c.stderr.some(t => /Error/.test(t)); }}',
            timeout=30_000)
        cell = page.evaluate(CELL_JS, MARK)

        # (b) The chart is drawn, and no character of it was missing.
        bad = [t for t in cell['stderr']
               if 'Glyph' in t or 'findfont' in t or 'Traceback' in t
               or 'Error' in t]
        assert not bad, 'the chart cell wrote:\n' + '\n---\n'.join(bad)
        assert cell['img'] and cell['img']['width'] > 100 \
            and cell['img']['height'] > 100, f'no chart shown: {cell}'
        image = page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) '
                             '.jp-OutputArea-output img').first
        image.scroll_into_view_if_needed()
        assert 'Saving file at' not in server.log(), \
            'JupyterLab saved the notebook into the repository'
    finally:
        try:
            page.screenshot(path=str(screenshot_dir / 'zh-jupyterlab.png'))
        finally:
            page.close()
            server.shutdown_kernels()
