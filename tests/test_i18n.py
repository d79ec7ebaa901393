"""Messages in the lesson's language (d2lpar/i18n.py): the catalogs are
complete and compiled, each language translates notices, printed results
and errors (with the English text after them), writes numbers its own way,
and passes the language on to the processes the launcher starts."""
import ast
import gettext
import importlib
import io
import os
import re
import string
import subprocess
import sys
import textwrap
import tokenize
import types

import pytest
from babel.messages.pofile import read_po

from d2lpar import (checks, cost, data, devices, distributed, i18n, plots,
                    sharding, timeline, timing, training)
from d2lpar.distributed import ddp_launch, launch, runs, scripts
from d2lpar import api as d2l_api

ROOT = os.path.dirname(os.path.dirname(i18n.__file__))
sys.path.insert(0, os.path.join(ROOT, 'tools'))
import messages  # noqa: E402

LANGS = ('fr', 'tr', 'zh')
SCRIPTS = ('ddp_train', 'kvstore_train')


def _catalog(path):
    with open(path, 'rb') as f:
        return read_po(f)


def _po(lang):
    return messages.LOCALE / lang / 'LC_MESSAGES' / 'd2lpar.po'


def _ids(catalog):
    return {m.id for m in catalog if m.id}


def _forms(message):
    return list(message.string) if message.pluralizable \
        else [message.string]


def _fields(text):
    """The replacement fields of a format string: name, conversion, spec."""
    return sorted((name, conversion, spec) for _, name, spec, conversion
                  in string.Formatter().parse(text) if name is not None)


@pytest.fixture
def speak(monkeypatch):
    """Switch the language for one test (conftest undoes D2LPAR_LANG)."""
    def use(lang):
        i18n.use_language(lang)
        return lang
    return use


def _english_error(call):
    """The text of the error `call()` raises, in English."""
    lang = os.environ.pop(i18n.ENVIRONMENT, None)
    try:
        with pytest.raises(Exception) as info:
            call()
    finally:
        if lang is not None:
            os.environ[i18n.ENVIRONMENT] = lang
    return type(info.value), str(info.value)


# --------------------------------------------------------------------------
# The catalogs
# --------------------------------------------------------------------------
def test_the_template_holds_every_string_of_the_code(tmp_path):
    """Extract again, as `make messages` does, and compare."""
    fresh = tmp_path / 'd2lpar.pot'
    assert not messages.extract(fresh)
    new, old = _ids(_catalog(fresh)), _ids(_catalog(messages.POT))
    assert not new - old, ('strings of the code missing from '
                           f'd2lpar.pot (run make messages): {new - old}')
    assert not old - new, f'd2lpar.pot has strings no longer in the code: ' \
                          f'{old - new}'
    # The comments lesson 4 shows come from the scripts' main functions
    assert 'DDP averages the gradients over processes' in new


@pytest.mark.parametrize('lang', LANGS)
def test_a_catalog_translates_every_message_of_the_template(lang):
    template, catalog = _catalog(messages.POT), _catalog(_po(lang))
    assert _ids(template) - _ids(catalog) == set(), 'run make messages'
    assert _ids(catalog) - _ids(template) == set(), 'run make messages'
    problems = []
    for m in catalog:
        if not m.id:
            continue
        msgid = m.id[1] if m.pluralizable else m.id
        if m.fuzzy or not all(_forms(m)):
            problems.append(f'untranslated or fuzzy: {msgid!r}')
        for form in filter(None, _forms(m)):
            if _fields(form) != _fields(msgid):  # e.g. {n} spelt {nb}
                problems.append(f'other fields than {msgid!r}: {form!r}')
            if lang == 'fr' and re.search(r' [:;!?]', form):
                problems.append(f'a space, not a no-break space, before '
                                f'punctuation: {form!r}')
    assert problems == []


@pytest.mark.parametrize('lang', LANGS)
def test_the_compiled_catalog_matches_its_source(lang):
    """The .mo shipped holds exactly the translations of the .po."""
    expected = {}
    for m in _catalog(_po(lang)):
        if m.id and m.pluralizable:
            expected.update({(m.id[0], i): s for i, s in enumerate(m.string)})
        elif m.id:
            expected[m.id] = m.string
    with open(_po(lang).with_suffix('.mo'), 'rb') as f:
        compiled = gettext.GNUTranslations(f)._catalog
    compiled = {k: v for k, v in compiled.items() if k != ''}
    stale = {k for k in expected.keys() | compiled.keys()
             if expected.get(k) != compiled.get(k)}
    assert stale == set(), f'd2lpar.mo is stale (run make messages): {stale}'


def test_decimal_signs_are_those_of_cldr():
    from babel import numbers
    for lang in i18n.LANGUAGES:
        assert i18n.DECIMAL_SIGN[lang] == numbers.get_decimal_symbol(lang)
        assert i18n.GROUP_SIGN[lang] == numbers.get_group_symbol(lang)


def test_importing_d2lpar_loads_no_babel():
    code = ('import sys, d2lpar.api, d2lpar.i18n; '
            'print(sorted(m for m in sys.modules if "babel" in m))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.strip() == '[]'


# --------------------------------------------------------------------------
# What a student reads
# --------------------------------------------------------------------------
RESULT = training.TrainResult(test_acc=0.853, sec_per_epoch=2.04,
                              devices=['cpu:0', 'cpu:1'], num_epochs=3,
                              num_examples=6000, test_accs=[])
EXPECTED = {
    'en': ('No GPU found, 2 devices requested: using 2 CPU stand-ins',
           'Device 1 alone: {}.{} sec',
           "test acc: 0.85, 2.0 sec/epoch on ['cpu:0', 'cpu:1']"),
    'fr': ('Aucun GPU trouvé, 2 périphériques demandés\u00a0: utilisation '
           'de 2 substituts CPU',
           'Device 1 alone\u00a0: {},{} s',
           "exactitude (test)\u00a0: 0,85, 2,0 s/époque sur "
           "['cpu:0', 'cpu:1']"),
    'tr': ('GPU bulunamadı, 2 aygıt istendi: 2 vekil CPU aygıtı',
           'Device 1 alone: {},{} s',
           "test doğruluğu: 0,85, dönem başına 2,0 s, aygıtlar: "
           "['cpu:0', 'cpu:1']"),
    'zh': ('未找到 GPU，请求了 2 个设备：改用 2 个 CPU 替身',
           'Device 1 alone：{}.{} 秒',
           "测试精度：0.85，每个迭代周期 2.0 秒，设备：['cpu:0', 'cpu:1']"),
}


@pytest.mark.parametrize('lang', i18n.LANGUAGES)
def test_a_notice_a_benchmark_line_and_a_result(lang, speak, capsys):
    if lang != 'en':
        speak(lang)
    notice, line, result = EXPECTED[lang]
    assert devices.fallback_notice(2, 0, 4, 'cpu:0, cpu:1').startswith(
        notice)
    with timing.Benchmark('Device 1 alone'):
        pass
    pattern = re.escape(line).replace(r'\{\}', '{}').format(
        r'\d+', r'\d{4}')
    assert re.fullmatch(pattern, capsys.readouterr().out.strip())
    assert str(RESULT) == result


ERRORS = [  # call, its exception type and English text (as it always
    # was), a word of each translation
    (lambda: checks.check_split(3, 3, ['a', 'b', 'c', 'd']), ValueError,
     'Cannot split 3 examples over 4 devices: each device needs at least '
     'one example. Use a larger batch or fewer devices.',
     {'fr': 'répartir', 'tr': 'bölünemez', 'zh': '无法'}),
    (lambda: checks.check_devices(None), TypeError,
     'devices must be a list of devices, got None; for example '
     'd2l.try_all_gpus().',
     {'fr': 'liste', 'tr': 'listesi', 'zh': '列表'}),
    (lambda: data.read_idx('/nonexistent/file.gz'), data.DataError,
     "/nonexistent/file.gz is not a readable gzip file ([Errno 2] No such "
     "file or directory: '/nonexistent/file.gz'). Delete it and run again "
     "to fetch a fresh copy.",
     {'fr': 'Supprimez', 'tr': 'Silip', 'zh': '删除'}),
    (lambda: checks.check_lr(float('nan')), ValueError,
     'The learning rate must be a finite number above 0, got nan: try 0.1.',
     {'fr': "taux d'apprentissage", 'tr': 'Öğrenme oranı', 'zh': '学习率'}),
    (lambda: cost.allreduce_time(1024, 2, 'pcie4', algorithm='tree'),
     ValueError,
     "Unknown algorithm 'tree': use one of 'ring', 'naive'.",
     {'fr': 'Algorithme inconnu', 'tr': 'Bilinmeyen algoritma',
      'zh': '未知的算法'}),
    (lambda: runs.device_options('torch', 1, 2, use_gpus=True),
     ValueError, 'use_gpus=True needs a GPU for each of the 2 processes; '
     'this machine has 1.',
     {'fr': 'chacun des 2 processus', 'tr': '2 sürecin', 'zh': '2 个进程'}),
    (lambda: devices.products_that_fit(
        types.SimpleNamespace(free_bytes=lambda d: 1 << 20), 50,
        (4000, 4000), ['cuda:0']),
     ValueError, 'cuda:0 has 0.00 GB free: not enough for even one product '
     'of shape (4000, 4000) (64 MB a result). Free GPU memory (restart the '
     'other notebooks that use it) or take smaller matrices.',
     {'fr': 'Libérez', 'tr': 'boşaltın', 'zh': '释放显存'}),
    # lesson 5: the checks of the collectives and of the ZeRO stages
    (lambda: sharding.check_collective([], 'all_gather', list, len,
                                       same_rows=False), ValueError,
     'all_gather got an empty list: it needs one of its shards per device.',
     {'fr': 'liste vide', 'tr': 'boş bir liste', 'zh': '空列表'}),
    (lambda: sharding.zero_memory(10, 2, 4), ValueError,
     'stage is 0 (no sharding), 1, 2 or 3, got 4.',
     {'fr': 'sans partitionnement', 'tr': 'parçalama yok', 'zh': '不分片'}),
    (lambda: distributed.train('mxnet', 2, pipelined=True),
     NotImplementedError, 'MXNet has no pipeline tool: see the from-scratch '
     'GPipe of lesson 5 (d2l.gpipe_step).',
     {'fr': "outil de pipeline", 'tr': 'ardışık düzen aracı',
      'zh': '流水线工具'}),
]


@pytest.mark.parametrize('lang', LANGS)
@pytest.mark.parametrize('call, kind, text, word', ERRORS, ids=[
    'check_split', 'check_devices', 'read_idx', 'check_lr', 'algorithm',
    'use_gpus', 'products_that_fit', 'collective', 'zero_stage',
    'pipelined_mxnet'])
def test_an_error_is_translated_then_given_in_english(lang, call, kind,
                                                       text, word, speak):
    english_kind, english = _english_error(call)
    assert english_kind is kind and english == text
    speak(lang)
    with pytest.raises(kind) as info:
        call()
    translated, sep, original = str(info.value).partition('\n(en) ')
    assert sep and original == english
    assert word[lang] in translated and translated != english


@pytest.mark.parametrize('lang, point', [('en', '.'), ('fr', ','),
                                         ('tr', ','), ('zh', '.')])
def test_numbers_follow_the_decimal_sign_of_the_language(lang, point,
                                                         speak):
    speak(lang)
    assert i18n.number(0.125, '.2f') == f'0{point}12'
    assert i18n._('{x:.1f} and {y}').format(x=2.25, y=0.5) == \
        f'2{point}2 and 0{point}5'
    # A value to be typed as code keeps its point: the divergence error
    # suggests a learning rate, written with !r or as a string
    assert i18n._('{x!r}').format(x=0.5) == '0.5'
    message = str(checks.diverged(0, 2.5))
    assert 'e.g. 0.25.' in message.split('(en)')[-1]
    assert '0.25' in message.split('\n')[0] and '2.5' in message


@pytest.mark.parametrize('lang, expected', [
    ('en', '91.6% | 6,000.00 MB | 0.0004 s |  50.0% | -5.0% '),
    ('fr', '91,6\u202f% | 6\u202f000,00 MB | 0,0004 s | 50,0\u202f% |'
           ' -5,0\u202f%'),
    ('tr', '%91,6 | 6.000,00 MB | 0,0004 s |  %50,0 | -%5,0 '),
    ('zh', '91.6% | 6,000.00 MB | 0.0004 s |  50.0% | -5.0% ')])
def test_fmt_writes_numbers_as_the_language_does(lang, expected, speak):
    # What the lessons print every number with: the template is the
    # lesson's (translated) string, the code the same in every language
    speak(lang)
    line = d2l_api.fmt('{:.1%} | {:,.2f} MB | {:.4f} s | {:>6.1%} | '
                       '{:<6.1%}', 0.916, 6000, 0.0004, 0.5, -0.05)
    assert line == expected
    assert i18n.display_width(line) == i18n.display_width(
        expected)  # padded fields keep their width
    assert d2l_api.fmt('{} of {n}', 'two', n=3) == 'two of 3'
    assert d2l_api.fmt('{:d} processes', 2) == '2 processes'
    if lang == 'tr':  # the sign before the percent sign, as for a minus
        assert d2l_api.fmt('{:+.0%}', 0.25) == '+%25'


def test_a_bad_language_code_is_a_clear_error():
    for code in ('de', 'FR', 'fr_FR', '', None, 'english'):
        with pytest.raises(ValueError,
                           match="use_language takes one of 'en', 'fr', "
                                 "'tr', 'zh'"):
            i18n.use_language(code)
        assert i18n.ENVIRONMENT not in os.environ
    assert i18n.language() == 'en'


def test_a_bad_language_in_the_environment_speaks_english(monkeypatch):
    monkeypatch.setenv(i18n.ENVIRONMENT, 'xx')
    with pytest.warns(UserWarning, match='D2LPAR_LANG=xx'):
        assert i18n.language() == 'en'
    assert str(RESULT).startswith('test acc: 0.85')


def test_the_launcher_passes_the_language_on(speak, tmp_path):
    """A script the launcher starts (here, ddp_train without torchrun,
    which stops at once with an error) speaks the lesson's language."""
    speak('fr')
    with launch.Processes(str(tmp_path)) as run:
        proc = run.start('script', [sys.executable, '-m',
                                    'd2lpar.distributed.ddp_train',
                                    '--out', str(tmp_path)],
                         launch.python_env())
        assert proc.wait(300) == 1
    log = run.tail('script')
    assert 'Lancez ce script avec torchrun' in log, log
    assert '(en) Start this script with torchrun' in log, log


def test_the_launcher_reads_a_translated_error_of_a_process(speak,
                                                            tmp_path):
    """torchrun's summary ends with the error of the failed rank: in a
    lesson in French, its French line, then its English one."""
    speak('fr')
    with pytest.raises(RuntimeError) as info:
        scripts.shards_of_epoch(_Args(), 64, 1, 2, 0, 0, []).__next__()
    log = tmp_path / 'torchrun.log'
    log.write_text(
        'Root Cause (first observed failure):\n  rank      : 1 (local_rank: '
        '1)\n  exitcode  : 1 (pid: 7)\n  traceback : Traceback (most '
        'recent call last):\n    File "x.py", line 1, in main\n  '
        + '\n  '.join(f'RuntimeError: {info.value}'.splitlines())
        + '\n\n=====\n', encoding='utf-8')
    rank, code, error = ddp_launch.torch_failure(str(log))
    assert (rank, code) == (1, '1')
    assert str(error) == ("RuntimeError: le rang 1 plante à l'étape 1, "
                          'comme demandé par --crash-at-step')
    assert error.english() == ('RuntimeError: rank 1 crashes at step 1, as '
                               'asked by --crash-at-step')


class _Args:
    """The options of a training script that crashes at once."""
    batch_size, leave_a_child, crash_at_step, crash_rank = 32, False, 1, 1
    seed, out = 0, ''


# --------------------------------------------------------------------------
# Tables, plots and the code lesson 4 shows
# --------------------------------------------------------------------------
PROCESS = {'rank': 0, 'steps': 23, 'examples': 2944, 'seconds_compute': 1.5,
           'seconds_communication': 0.25, 'seconds_total': 2.0}


def _run(framework='torch'):
    return distributed.DistributedResult(
        test_acc=0.9, sec_per_epoch=1.0, devices=['cpu (rank 0)'],
        num_epochs=1, num_examples=2944, test_accs=[0.9], framework=framework,
        backend='gloo',
        processes=[PROCESS], out_dir='', summary={})


def test_the_table_of_processes_reads_as_before_in_english(capsys):
    plots.print_processes(_run())
    p = PROCESS
    assert capsys.readouterr().out.splitlines() == [
        f'{"process":<22}{"steps":>6}{"examples":>9}{"compute s":>11}'
        f'{"comm. s":>9}{"total s":>9}{"comm. %":>9}',
        '-' * 75,
        f'{"torch x1: rank 0":<22}{p["steps"]:>6}{p["examples"]:>9}'
        f'{1.5:>11.3f}{0.25:>9.3f}{2.0:>9.3f}{12.5:>8.0f}%']


@pytest.mark.parametrize('lang', LANGS)
def test_the_table_of_processes_lines_up_in_every_language(lang, speak,
                                                           capsys):
    speak(lang)
    plots.print_processes([_run(), _run('mxnet')])
    head, rule, *rows = capsys.readouterr().out.splitlines()
    widths = {i18n.display_width(line) for line in [head, rule] + rows}
    # Chinese writes the multiplication sign (the review's PO-3)
    assert len(widths) == 1 and ('×1' if lang == 'zh' else 'x1') in rows[1]
    assert i18n._('compute s') in head and head != i18n.Message(
        'compute s').english()
    if lang in ('fr', 'tr'):
        assert '1,500' in rows[0]


@pytest.mark.parametrize('lang, share', [
    ('fr', '12\u202f%'), ('tr', '%12'), ('zh', '12%')])
def test_the_share_of_communication_is_written_as_the_language_does(
        lang, share, speak, capsys):
    speak(lang)
    plots.print_processes(_run())
    row = capsys.readouterr().out.splitlines()[-1]
    assert row.endswith(share), row


def test_plots_are_labelled_in_the_language(speak):
    import matplotlib.pyplot as plt
    speak('fr')
    timing.Benchmark.records.append(('a', 0.5))
    ax = plt.subplots()[1]
    plots.plot_timings(['a'], ax=ax)
    assert ax.get_xlabel() == 'secondes'
    assert ax.texts[0].get_text() == ' 0,500'
    recorded = timeline.Timeline()
    recorded.source = 'torch.profiler'
    recorded.events = [timeline.Event('mm', 'main thread', 0, 1),
                       timeline.Event('cp', 'cpu:0 copy', 0, 1, 'copy')]
    ax = plt.subplots()[1]
    recorded.plot(ax=ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        'cpu:0 (copies)', 'thread principal']
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        'calcul', 'copie']
    assert ax.get_title() == "d'après torch.profiler"
    assert ax.get_xlabel() == 'millisecondes'
    plt.close('all')


def test_the_plots_and_figures_of_the_cost_model_speak_the_language(
        speak, monkeypatch, capsys):
    import matplotlib.pyplot as plt
    monkeypatch.setattr(plt, 'show', lambda: None)
    speak('fr')
    # A lesson prints it in its tables, beside numbers that d2l.fmt writes
    # with the language's decimal sign: the same sign here
    assert cost.format_seconds(5.77e-3) == '5,77 ms'
    assert cost.format_seconds(2.5) == '2,5 s'
    rows = [{'devices': 2, 'algorithm': 'ring', 'bytes': b, 'seconds': 1e-4,
             'on': 'cpu'} for b in (1024, 4096)]
    cost.plot_cost_model(rows, links=['pcie4'])
    ax = plt.gcf().axes[0]
    assert ax.get_title() == (
        'allreduce sur 2 périphériques\u00a0: '
        "l'anneau selon le modèle de coût et cette machine")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        'PCIe 4.0 x16', 'mesuré ici\u00a0: ring']
    plots.plot_allreduce(rows, copy_bandwidth=2e10)
    ax = plt.gcf().axes[0]
    assert ax.get_title() == '2 substituts CPU'
    assert ax.get_legend().get_texts()[-1].get_text() == \
        'mémoire du CPU\u00a0: 2kN octets à 20 Go/s'
    plots.plot_drift([0.0, 1e-8, 2e-8])
    ax = plt.gcf().axes[0]
    assert (ax.get_xlabel(), ax.get_title()) == (
        'étape', 'paramètres sur 1 périphérique et sur 2')
    ax = sharding.plot_memory(1000, [1, 2])
    assert (ax.get_xlabel(), ax.get_ylabel()) == (
        'nombre de périphériques', 'Mo par périphérique')
    assert ax.get_legend().get_texts()[0].get_text() == \
        'parallélisme de données'
    assert ax.get_title().startswith('état du modèle par périphérique')
    plt.close('all')
    speak('zh')
    runs.device_options('torch', 2, 2, use_gpus=False)
    assert capsys.readouterr().out.strip() == (
        '按要求（use_gpus=False），2 个进程都在 CPU 上运行，'
        '尽管本机有 2 个 GPU。')


def _main_source(script):
    """The source of `main` in d2lpar/distributed/<script>.py, decorators
    included, as inspect.getsource gives it (without importing the
    framework)."""
    path = os.path.join(ROOT, 'd2lpar', 'distributed', f'{script}.py')
    with open(path, encoding='utf-8') as f:
        source = f.read()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == 'main':
            start = min([node.lineno] +
                        [d.lineno for d in node.decorator_list])
            return ''.join(source.splitlines(keepends=True)
                           [start - 1:node.end_lineno])


def _code_tokens(source):
    return [(t.type, t.string) for t in tokenize.generate_tokens(
        io.StringIO(source).readline) if t.type not in (
        tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
        tokenize.DEDENT)]


@pytest.mark.parametrize('lang', LANGS)
@pytest.mark.parametrize('script', SCRIPTS)
def test_the_training_script_shows_its_comments_in_the_language(
        script, lang, speak):
    source = _main_source(script)
    english = {c.text for c in i18n.comments(source)}
    assert i18n.translate_comments(source) == source  # English
    speak(lang)
    shown = i18n.translate_comments(source)
    assert _code_tokens(shown) == _code_tokens(source)  # the same code
    comments = i18n.comments(shown)
    assert len(comments) >= len(english) > 5
    assert not {c.text for c in comments} & english  # none left in English
    for line in shown.splitlines():
        if line.lstrip().startswith('#'):
            assert i18n.display_width(line) <= i18n.LINE_WIDTH, line


@pytest.mark.parametrize('lang', LANGS)
@pytest.mark.parametrize('script', SCRIPTS)
def test_every_listing_of_lesson_4_parses_in_every_language(
        script, lang, speak):
    module = importlib.import_module(f'd2lpar.distributed.{script}')
    shown = [getattr(module, name) for name in i18n.SHOWN
             if hasattr(module, name)]
    assert shown
    speak(lang)
    for fn in shown:
        ast.parse(textwrap.dedent(i18n.source_code(fn)))


def test_a_long_comment_moves_above_a_continued_statement(speak):
    # The French comment no longer fits after the code of the continued
    # line: it goes above the whole statement, not between its lines
    operand = 'b' * 50
    source = (f'def f(a, {operand}):\n'
              f'    total = a + \\\n'
              f'        {operand}  # cosine decay\n'
              f'    return total\n')
    speak('fr')
    shown = i18n.translate_comments(source)
    assert shown.splitlines()[1:5] == [
        '    # décroissance en cosinus', '    total = a + \\',
        f'        {operand}', '    return total']
    ast.parse(shown)


def test_source_code_is_the_source_of_a_function(speak):
    def step(lr):
        # cosine decay
        return lr / 2  # cosine decay

    assert i18n.source_code(step).count('# cosine decay') == 2
    speak('fr')
    assert i18n.source_code(step).count('# décroissance en cosinus') == 2


# --------------------------------------------------------------------------
# The teacher's guides (docs/teaching/<lang>.md) move together
# --------------------------------------------------------------------------
def _guide_outline(lang):
    """The guide's headings as (level, lesson number or None), and the
    lessons its overview table lists."""
    with open(os.path.join(ROOT, 'docs', 'teaching', f'{lang}.md'),
              encoding='utf-8') as f:
        text = f.read()
    outline = []
    for hashes, title in re.findall(r'^(#{1,3}) (.*)$', text, re.M):
        # A lesson's number, with the letter of its notebook (2a, 2b)
        number = re.search(r'\d+[ab]?', title) if len(hashes) == 3 else None
        outline.append((len(hashes), number and number.group()))
    lessons = re.findall(r'^\| (\d[ab]?)\. ', text, re.M)
    return outline, lessons


@pytest.mark.parametrize('lang', LANGS)
def test_every_guide_has_the_outline_of_the_english_one(lang):
    # Same sections, in the same order, about the same lessons: a lesson
    # or a section added to one guide and not to the others fails here
    outline, lessons = _guide_outline(lang)
    en_outline, en_lessons = _guide_outline('en')
    assert lessons == en_lessons == ['1', '2a', '2b', '3', '4a', '4b', '5']
    assert outline == en_outline, (
        f'docs/teaching/{lang}.md has the headings {outline}, the English '
        f'guide {en_outline}')
