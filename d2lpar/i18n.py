"""Every message of d2lpar in the lesson's language, through gettext.

A lesson picks its language once, in its first cell::

    d2l.use_language('fr')   # 'en' (the default), 'fr', 'tr' or 'zh'

From then on the notices, printed results, errors and the labels of the
plots that d2lpar draws are in that language, with its decimal sign
(``0,85`` in French and Turkish). The language is kept in the environment
variable ``D2LPAR_LANG``, so the processes started afterwards (the
training scripts of lesson 4, the processes of ``train_concise``) speak it
too; setting the variable by hand does the same.

An error or a warning gives the English text after the translated one,
``<translated>\\n(en) <English>``, for searching the web; its type stays
what it was. In English every message reads as it always did.

Writing a message (``make messages`` then updates the catalogs in
``d2lpar/locale``; see tools/messages.py):

- ``_('{n} devices').format(n=2)``: translated now; ``format`` writes the
  numbers of the fields with the language's decimal sign. Use named fields,
  so that a translation can put them in another order, and ``!r`` (or a
  string) for a value that a student would type as code, so that its
  decimal point stays a point.
- ``ngettext(singular, plural, n)``: the same, with plural forms.
- ``N_('...')``: only marks a string for the catalog; ``_`` translates it
  later.
- ``Message('...', **fields)``: a message rendered when shown, in English
  or translated; fields may be Messages themselves.
- ``error_message('...', **fields)``: the text of an exception or warning.

Only the standard library is imported here; Babel is needed only to
extract and compile the catalogs.
"""
import gettext as _gettext
import numbers
import os
import string
import unicodedata

LANGUAGES = ('en', 'fr', 'tr', 'zh')
ENVIRONMENT = 'D2LPAR_LANG'
DOMAIN = 'd2lpar'
LOCALE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                          'locale')
# How each language writes 1234.5 (CLDR, as Babel has it; a test compares)
DECIMAL_SIGN = {'en': '.', 'fr': ',', 'tr': ',', 'zh': '.'}
GROUP_SIGN = {'en': ',', 'fr': '\u202f', 'tr': '.', 'zh': ','}
# The width of a line of code that `source_code` keeps comments within
LINE_WIDTH = 79

_catalogs = {}
_warned = set()


def use_language(code):
    """Show every message of d2lpar in the language `code`: 'en' (the
    default), 'fr', 'tr' or 'zh'. Processes started afterwards inherit it
    (through the environment variable D2LPAR_LANG)."""
    if code not in LANGUAGES:
        raise ValueError(error_message(
            'Unknown language {code!r}: use_language takes one of {codes}.',
            code=code, codes=', '.join(repr(c) for c in LANGUAGES)))
    if code != 'en' and _catalog(code) is None:
        raise RuntimeError(f'The message catalog of {code!r} is missing '
                           f'from {LOCALE_DIR}: reinstall d2lpar, or run '
                           f'`make messages` in a checkout.')
    os.environ[ENVIRONMENT] = code


def language():
    """The code of the language messages are shown in now."""
    code = os.environ.get(ENVIRONMENT) or 'en'
    if code in LANGUAGES:
        return code
    if code not in _warned:  # say it once, then speak English
        _warned.add(code)
        import warnings
        warnings.warn(f'{ENVIRONMENT}={code} is not one of '
                      f'{", ".join(LANGUAGES)}: d2lpar speaks English.',
                      stacklevel=2)
    return 'en'


def _catalog(code):
    """The compiled catalog of `code`, or None (English, or missing)."""
    if code == 'en':
        return None
    if code not in _catalogs:
        try:
            _catalogs[code] = _gettext.translation(DOMAIN, LOCALE_DIR,
                                                   languages=[code])
        except OSError:
            _catalogs[code] = None
    return _catalogs[code]


class _LocalNumbers(string.Formatter):
    """str.format, with the decimal and grouping signs of a language in
    the numbers of the fields (not in fields converted with !r or !s)."""

    def __init__(self, lang):
        self.lang = lang
        self.signs = {ord('.'): DECIMAL_SIGN[lang], ord(','): GROUP_SIGN[lang]}

    def format_field(self, value, format_spec):
        text = format(value, format_spec)
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            text = text.translate(self.signs)
            if format_spec.endswith('%'):
                text = _percent(text, self.lang)
        return text


def _percent(text, lang):
    """A percentage formatted by Python ('91,6%', perhaps padded) written
    as `lang` writes it: '91,6 %' in French (a narrow no-break space
    before the sign), '%91,6' in Turkish (the sign first, after a minus),
    as is in English and Chinese. Padding with spaces keeps its width
    (other fill characters are left as Python wrote them)."""
    body = text.strip()
    if lang == 'fr':
        new = body[:-1] + '\u202f%'
    elif lang == 'tr':
        sign = body[0] if body[0] in '+-' else ''
        new = sign + '%' + body[len(sign):-1]
    else:
        return text
    start = text.index(body)
    before, after = text[:start], text[start + len(body):]
    if len(new) > len(body) and before:  # padded: keep the width
        before = before[1:]
    elif len(new) > len(body) and after:
        after = after[1:]
    return before + new + after


class Text(str):
    """A message in one language, whose `format` writes numbers as that
    language does."""
    lang = 'en'

    def __new__(cls, text, lang='en'):
        self = super().__new__(cls, text)
        self.lang = lang
        return self

    def format(self, *args, **fields):
        if self.lang in ('en', 'zh'):  # Python's own signs
            return str.format(self, *args, **fields)
        return _LocalNumbers(self.lang).vformat(str(self), args, fields)


def _(message):
    """`message` in the lesson's language (itself when no translation is
    known), as a `Text`."""
    lang = language()
    catalog = _catalog(lang)
    if catalog is None or not message:  # gettext('') is the header
        return Text(message, lang)
    return Text(catalog.gettext(message), lang)


def ngettext(singular, plural, n):
    """The form of the message for the number `n`, translated."""
    lang = language()
    catalog = _catalog(lang)
    if catalog is None:
        return Text(singular if n == 1 else plural, lang)
    return Text(catalog.ngettext(singular, plural, n), lang)


def number(value, spec=''):
    """`value` formatted with the format spec `spec` ('.3f', ...) and the
    decimal sign of the lesson's language."""
    return Text('{0:%s}' % spec, language()).format(value)


def fmt(template, *args, **fields):
    """``template.format(*args, **fields)``, with the numbers written as
    the lesson's language writes them: the decimal sign and the grouping
    of thousands ('0,0004', '6 000,00' in French, '6.000,00' in Turkish)
    and percentages ('91,6 %' in French, '%91,6' in Turkish). The lessons
    print every number through it, with the template in their language;
    the code stays the same in every language."""
    return str(Text(template, language()).format(*args, **fields))


def N_(message):
    """Mark `message` for the catalog without translating it now."""
    return message


class Message:
    """A message with its fields, rendered when it is shown: ``str()``
    gives it in the lesson's language, `english` as it is written."""

    def __init__(self, message, **fields):
        self.message, self.fields = message, fields

    def render(self, english=False):
        fields = {k: v.render(english) if isinstance(v, Message) else v
                  for k, v in self.fields.items()}
        if english:
            return self.message.format(**fields)
        return _(self.message).format(**fields)

    def english(self):
        return self.render(english=True)

    def __str__(self):
        return self.render()


class Bilingual(Message):
    """A text that is already written in the lesson's language and in
    English, such as a d2lpar error read from the log of a process."""

    def __init__(self, translated, english):
        super().__init__(english)
        self.translated = translated

    def render(self, english=False):
        return self.message if english else self.translated


def bilingual(message):
    """The text of an error or warning for the `Message` `message`: in
    English, the English text; else the translation, then ``(en)`` and the
    English text on a line of its own."""
    english, translated = message.english(), message.render()
    if translated == english:
        return english
    return f'{translated}\n(en) {english}'


def error_message(message, **fields):
    """The text of an error or warning: see `bilingual`."""
    return bilingual(Message(message, **fields))


# --------------------------------------------------------------------------
# Text that lines up in a fixed-width font, Chinese included
# --------------------------------------------------------------------------
# The messages said so far in this process (`say_once`)
_said = set()


def say_once(message):
    """Print `message` the first time it is asked for in this process."""
    if message not in _said:
        _said.add(message)
        print(message)


def display_width(text):
    """Columns `text` takes in a fixed-width font (a CJK character two)."""
    return sum(2 if unicodedata.east_asian_width(c) in 'WF' else 1
               for c in text)


def pad(text, width, align='<'):
    """`text` padded with spaces to `width` columns ('<' or '>')."""
    space = ' ' * max(0, width - display_width(text))
    return text + space if align == '<' else space + text


def wrap(text, width):
    """`text` cut into lines of at most `width` columns: between words,
    and between CJK characters, which need no space (never before a
    closing punctuation mark)."""
    tokens = []
    for token in _tokens(text):
        if tokens and token in _CLOSING:
            tokens[-1] += token
        else:
            tokens.append(token)
    lines, line = [], ''
    for token in tokens:
        if line.strip() and display_width(line + token) > width:
            lines.append(line.rstrip())
            line = token.lstrip()
        else:
            line += token
    if line.strip():
        lines.append(line.rstrip())
    return lines


_CLOSING = set('，。、；：！？）」』》…')


def _tokens(text):
    """Words (with the spaces before them) and single CJK characters."""
    token = ''
    for c in text:
        if display_width(c) == 2:
            if token:
                yield token
            yield c
            token = ''
        elif c == ' ' and token.strip():
            yield token
            token = c
        else:
            token += c
    if token:
        yield token


# --------------------------------------------------------------------------
# The comments of the code a lesson shows
# --------------------------------------------------------------------------
class _Comment:
    """A comment of a piece of code: consecutive full-line comments at one
    column make one `text`; a comment after code is one on its own."""

    def __init__(self, first_row, col, text, trailing):
        self.first_row = self.last_row = first_row
        self.col, self.text, self.trailing = col, text, trailing


def comments(source):
    """The comments of the Python code `source`, in order (rows from 1)."""
    import io
    import tokenize
    found = []
    lines = source.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return found
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        (row, col), text = tok.start, tok.string.lstrip('#').strip()
        trailing = bool(lines[row - 1][:col].strip())
        last = found[-1] if found else None
        if (last and not trailing and not last.trailing
                and last.col == col and last.last_row == row - 1):
            last.text += ' ' + text
            last.last_row = row
        elif text:
            found.append(_Comment(row, col, text, trailing))
    return found


def source_code(fn):
    """The source of the function `fn`, as ``inspect.getsource`` gives it,
    with its comments in the lesson's language (the code is the same in
    every language)."""
    import inspect
    return translate_comments(inspect.getsource(fn))


def translate_comments(source):
    """The Python code `source` with the comments that the catalog knows
    in the lesson's language; one too long to stay after its code moves
    onto lines of its own above it."""
    if _catalog(language()) is None:
        return source
    lines = source.splitlines(keepends=True)
    for comment in reversed(comments(source)):
        text = _(comment.text)
        if text == comment.text:
            continue
        first, last = comment.first_row - 1, comment.last_row
        code = lines[first][:comment.col]
        if comment.trailing:
            line = f'{code}# {text}'
            if display_width(line) <= LINE_WIDTH:
                lines[first] = line + '\n'
                continue
            # Too long after the code: on lines of its own, above the
            # statement (a comment line inside a backslash continuation
            # would end the statement there)
            start = first
            while start and lines[start - 1].rstrip().endswith('\\'):
                start -= 1
            indent = lines[start][:len(lines[start])
                                  - len(lines[start].lstrip())]
            lines[first:last] = [code.rstrip() + '\n']
            lines[start:start] = _comment_lines(text, indent)
        else:
            lines[first:last] = _comment_lines(text, code)
    return ''.join(lines)


def _comment_lines(text, indent):
    width = max(20, LINE_WIDTH - len(indent) - 2)
    return [f'{indent}# {line}\n' for line in wrap(text, width)]


# The functions of the training scripts that lesson 4 shows
SHOWN = ('main', 'save_checkpoint', 'resume', 'accumulate_gradients',
         'evaluate_shared')


def extract_script(fileobj, keywords, comment_tags, options):
    """A Babel extraction method (babel.cfg) for the training scripts: the
    messages Babel's Python extractor finds, and the comments of their
    functions that lesson 4 shows with `source_code` (`SHOWN`)."""
    import ast
    from babel.messages.extract import extract_python
    data = fileobj.read()
    fileobj.seek(0)
    yield from extract_python(fileobj, keywords, comment_tags, options)
    source = data.decode(options.get('encoding', 'utf-8'))
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in SHOWN:
            start = min([node.lineno] +
                        [d.lineno for d in node.decorator_list])
            shown = ''.join(source.splitlines(keepends=True)
                            [start - 1:node.end_lineno])
            for comment in comments(shown):
                yield (start + comment.first_row - 1, None, comment.text,
                       ['A comment of the training script, shown by lesson '
                        '4 (d2l.source_code). Long ones are rewrapped.'])
