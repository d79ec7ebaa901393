"""`make lab` picks JupyterLab's language (tools/lab_language.py): LAB_LANG
when given, else the machine's locale, else English. The browser test
(tests/browser/test_jupyterlab_zh.py) checks that JupyterLab follows the
setting it writes."""
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOOL = ROOT / 'tools' / 'lab_language.py'
_spec = importlib.util.spec_from_file_location('lab_language', TOOL)
lab_language = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lab_language)


@pytest.mark.parametrize('choice, locale', [
    ('zh', 'zh_CN'), ('fr', 'fr_FR'), ('tr', 'tr_TR'), ('en', 'en'),
    ('ZH', 'zh_CN'), ('zh_CN.UTF-8', 'zh_CN'), ('fr-FR', 'fr_FR'),
    ('tr_TR.utf8', 'tr_TR'), ('en_GB', 'en')])
def test_lab_lang_chooses(choice, locale):
    # LAB_LANG wins over the locale of the machine
    assert lab_language.lab_locale(
        choice, {'LC_ALL': 'tr_TR.UTF-8', 'LANG': 'fr_FR.UTF-8'}) == locale


@pytest.mark.parametrize('choice', ['de', 'ja_JP', 'C', 'chinese'])
def test_lab_lang_without_a_pack_is_an_error(choice):
    with pytest.raises(ValueError, match='fr, tr, zh'):
        lab_language.lab_locale(choice, {})


@pytest.mark.parametrize('environ, locale', [
    ({'LANG': 'zh_CN.UTF-8'}, 'zh_CN'),
    ({'LANG': 'zh_TW.UTF-8'}, 'zh_CN'),  # the one Chinese pack there is
    ({'LANG': 'fr_CA.UTF-8'}, 'fr_FR'),
    ({'LANG': 'tr_TR.UTF-8'}, 'tr_TR'),
    ({'LC_ALL': 'tr_TR.UTF-8', 'LANG': 'fr_FR.UTF-8'}, 'tr_TR'),
    ({'LC_MESSAGES': 'fr_FR.UTF-8', 'LANG': 'zh_CN.UTF-8'}, 'fr_FR'),
    ({'LC_ALL': '', 'LANG': 'fr_FR.UTF-8'}, 'fr_FR'),  # empty = not set
    ({'LANG': 'de_DE.UTF-8'}, 'en'),  # no German pack: English
    ({'LANG': 'C.UTF-8'}, 'en'),
    ({'LANG': 'POSIX'}, 'en'),
    ({'LC_CTYPE': 'zh_CN.UTF-8'}, 'en'),  # not a messages variable
    ({}, 'en')])
def test_the_machines_locale_chooses(environ, locale):
    assert lab_language.lab_locale('', environ) == locale


def test_the_choice_is_a_default_setting_of_the_translation_plugin(tmp_path):
    folder = lab_language.write_config('zh_CN', root=tmp_path)
    assert folder == tmp_path / 'build' / 'jupyter-language' / 'zh_CN'
    path = folder / 'labconfig' / 'default_setting_overrides.json'
    assert json.loads(path.read_text(encoding='utf-8')) == {
        '@jupyterlab/translation-extension:plugin': {'locale': 'zh_CN'}}
    # the pack of every language is a pin of every lock file, and in the
    # lab extra of pyproject.toml
    locks = sorted((ROOT / 'requirements').glob('lock-py*.txt'))
    assert locks
    extra = (ROOT / 'pyproject.toml').read_text(encoding='utf-8')
    for locale in lab_language.PACKS.values():
        if locale != 'en':
            pack = 'jupyterlab-language-pack-' + locale.replace('_', '-')
            for lock in locks:
                assert f'{pack}==' in lock.read_text(encoding='utf-8'), \
                    (lock.name, pack)
            assert f'"{pack}' in extra, pack


def test_an_unknown_lab_lang_stops_make_lab():
    result = subprocess.run([sys.executable, str(TOOL), 'de'],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and not result.stdout
    assert "LAB_LANG='de'" in result.stderr
